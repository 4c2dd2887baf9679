"""Raft messages between peers on the wire (drivers/raft/codec.py): every message type
comes back equal after a trip through real frame bytes; each field travels as its JSON
text (what older peers send and read); a field of the wrong kind is refused, not handed
to the core."""
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.drivers.raft.codec import RAFT_MESSAGE, decode_message, encode_message
from ledgermq.remoting.command import FrameSplitter, RemotingCommand
from ledgermq.remoting.codes import SerializeType
from ledgermq.replication.raft import (
    Code, Entry, Push, PushResponse, PushType, TimeoutNow, VoteRequest, VoteResponse,
)

ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
ints = st.integers(-(1 << 63), (1 << 63) - 1)
entries = st.lists(st.builds(Entry, ints, ints, st.binary(max_size=40)), max_size=3).map(tuple)
messages = st.one_of(
    st.builds(VoteRequest, ids, ids, ints, ints, ints, st.booleans(), st.booleans()),
    st.builds(VoteResponse, ids, ids, ints, st.booleans(), st.booleans()),
    st.builds(Push, ids, ids, ints, st.sampled_from(PushType), ints, entries, ints, ints),
    st.builds(PushResponse, ids, ids, ints, st.sampled_from(PushType), ints, ints,
              st.sampled_from(Code), ints, ints),
    st.builds(TimeoutNow, ids, ids, ints))


def over_the_wire(cmd: RemotingCommand, stype: SerializeType) -> RemotingCommand:
    cmd.serialize_type = stype
    frame = b"".join(bytes(b) for b in cmd.encode())
    (got,) = FrameSplitter().feed(frame)
    return got


@settings(max_examples=300, deadline=None)
@given(messages, st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
def test_every_message_comes_back_equal(msg, stype):
    assert decode_message(over_the_wire(encode_message(msg), stype)) == msg


@settings(max_examples=200, deadline=None)
@given(messages)
def test_each_field_travels_as_its_json_text(msg):
    """The form every ledgermq version sends: a peer of another version reads it."""
    ext = encode_message(msg).ext
    assert ext.pop("t") == type(msg).__name__
    for name, text in ext.items():
        value = getattr(msg, name)
        if isinstance(value, (PushType, Code)):
            assert text == value.value
        else:
            assert orjson.loads(text) == value and type(orjson.loads(text)) is type(value)


PUSH = Push("n0", "n1", 3, PushType.COMMIT, -1, (), 7)
VOTE = VoteResponse("n1", "n0", 3, True)


@pytest.mark.parametrize("msg,change", [
    (PUSH, {"term": "1.5"}), (PUSH, {"term": '"3"'}), (PUSH, {"term": "true"}),
    (PUSH, {"term": "null"}), (PUSH, {"term": "+3"}), (PUSH, {"term": "03"}),
    (PUSH, {"commit": "[7]"}), (PUSH, {"kind": "append"}), (PUSH, {"kind": "BOGUS"}),
    (PUSH, {"t": "Nope"}), (VOTE, {"granted": "1"}), (VOTE, {"granted": '"true"'}),
])
def test_a_field_of_the_wrong_kind_is_refused(msg, change):
    ext = {**encode_message(msg).ext, **change}
    with pytest.raises((KeyError, ValueError, TypeError)):
        decode_message(RemotingCommand(RAFT_MESSAGE, ext=ext))


def test_a_field_left_out_takes_its_default():
    ext = encode_message(PUSH).ext
    del ext["prev_term"]
    assert decode_message(RemotingCommand(RAFT_MESSAGE, ext=ext)).prev_term == -1
