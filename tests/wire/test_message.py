"""Stored-message layout: the batch encoder, the reference encoder and the decoder agree."""
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.wire.batch import encode_batch, fill_positions
from ledgermq.wire.message import (
    MAGIC_CODE, Message, MessageFormatError, decode_message, decode_offset_msg_id,
    encode_message, encode_properties, decode_properties, offset_msg_id, pack_host,
    property_value, queue_offset_and_reconsume, tag_hash,
)

pytestmark = pytest.mark.usefixtures("wire_impl")  # compiled and pure twins

topics = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=40)
bodies = st.binary(max_size=300)
prop_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02",
                                           blacklist_categories=("Cs",)), max_size=20)
props = st.dictionaries(st.text(alphabet="ABCDEFGHIJK_", min_size=1, max_size=8), prop_text,
                        max_size=4)


def test_java_string_hash_matches_java():
    # values of java.lang.String#hashCode
    assert tag_hash("hello") == 99162322
    assert tag_hash("a") == 97
    assert tag_hash("Aa") == tag_hash("BB") == 2112
    assert tag_hash("polygenelubricants") == -2147483648
    assert tag_hash(None) == 0 and tag_hash("") == 0


def test_layout_offsets_match_rocketmq():
    raw = encode_message(Message("TopicTest", b"hi", queue_id=3, properties={"TAGS": "T"}),
                         queue_offset=7, phys_offset=1234, store_timestamp=99)
    assert int.from_bytes(raw[0:4], "big") == len(raw)
    assert int.from_bytes(raw[4:8], "big", signed=True) == MAGIC_CODE
    assert int.from_bytes(raw[8:12], "big") == zlib.crc32(b"hi") & 0x7FFFFFFF
    assert int.from_bytes(raw[12:16], "big") == 3
    assert int.from_bytes(raw[20:28], "big") == 7
    assert int.from_bytes(raw[28:36], "big") == 1234
    assert int.from_bytes(raw[56:64], "big") == 99
    assert int.from_bytes(raw[84:88], "big") == 2 and raw[88:90] == b"hi"
    assert raw[90] == len("TopicTest") and raw[91:100] == b"TopicTest"


@settings(max_examples=200, deadline=None)
@given(topics, st.lists(st.tuples(bodies, props), min_size=1, max_size=20),
       st.integers(0, 1000), st.integers(0, 1 << 40))
def test_batch_encoding_equals_reference(topic, items, qoff, phys):
    props_raw = [encode_properties(p) for _, p in items]
    batch = encode_batch(topic, 5, [b for b, _ in items], props_raw,
                         [p.get("TAGS") for _, p in items], born_timestamp=42)
    fill_positions(batch, 0, len(batch), phys, qoff, 777)
    expected, pos = [], phys
    for i, (body, p) in enumerate(items):
        one = encode_message(Message(topic, body, queue_id=5, properties=p, born_timestamp=42),
                             queue_offset=qoff + i, phys_offset=pos, store_timestamp=777)
        expected.append(one)
        pos += len(one)
    assert bytes(batch.buf) == b"".join(expected)
    assert list(batch.sizes) == [len(e) for e in expected]
    for raw, (body, p) in zip(expected, items):
        m = decode_message(raw)
        assert (m.topic, m.body, m.properties) == (topic, body, p)


@given(props)
def test_properties_round_trip(p):
    raw = encode_properties(p)
    assert decode_properties(raw) == p
    for k, v in p.items():
        assert property_value(raw, k) == v


def test_property_value_does_not_match_a_key_suffix():
    raw = encode_properties({"XTAGS": "no", "TAGS": "yes"})
    assert property_value(raw, "TAGS") == "yes"


def test_offset_message_id_round_trip():
    host = pack_host("10.1.2.3", 10911)
    mid = offset_msg_id(host, 123456789)
    assert len(mid) == 32 and mid == mid.upper()
    assert decode_offset_msg_id(mid) == ("10.1.2.3", 10911, 123456789)


def test_bad_inputs_are_clear_errors():
    import pytest
    with pytest.raises(MessageFormatError, match="topic"):
        encode_batch("t" * 200, 0, [b"x"])
    with pytest.raises(MessageFormatError, match="maxMessageSize"):
        encode_batch("t", 0, [b"x" * 2000], max_message_size=1000)
    with pytest.raises(MessageFormatError, match="empty"):
        encode_batch("t", 0, [])
    with pytest.raises(MessageFormatError):
        decode_message(b"\x00" * 100)
    with pytest.raises(MessageFormatError, match="hex"):
        decode_offset_msg_id("zz")
    raw = bytearray(encode_message(Message("t", b"body")))
    raw[90] ^= 0xFF  # flip a body byte
    with pytest.raises(MessageFormatError, match="CRC"):
        decode_message(raw)


def test_the_codec_tests_run_on_the_implementation_asked(wire_impl):
    """wire_impl points every bound name at one twin: encode_batch calls the C layout in
    the native run and the numpy one in the pure run."""
    from ledgermq.wire import batch, native
    pure, compiled = native.TWINS["encode_stored"]
    assert batch.encode_stored is (pure if wire_impl == "pure" else compiled)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(0, 1000), st.booleans(), st.booleans(),
       bodies, props)
def test_queue_offset_and_reconsume_read_in_place_as_decoded(qoff, reconsumed, born_v6,
                                                             store_v6, body, p):
    """What a pop reads of a message without decoding it is what decoding says, IPv6
    hosts (20 bytes each, which move the reconsume count) included."""
    raw = bytearray(encode_message(Message("T", body, properties=p, reconsume_times=reconsumed),
                                   queue_offset=qoff))
    for flag, at, on in ((0x10, 48, born_v6), (0x20, 64 + (12 if born_v6 else 0), store_v6)):
        if on:  # a 16-byte address and its port instead of 4 + 4
            raw[at:at + 8] = bytes(16) + raw[at + 4:at + 8]
            raw[36:40] = (int.from_bytes(raw[36:40], "big") | flag).to_bytes(4, "big")
    raw[0:4] = len(raw).to_bytes(4, "big")
    m = decode_message(bytes(raw))
    assert queue_offset_and_reconsume(bytes(raw)) == (m.queue_offset, m.reconsume_times) == \
        (qoff, reconsumed)
    for bad in (bytes(raw[:50]), b"\0" * 200, bytes(raw[:-1])):
        with pytest.raises(MessageFormatError):
            queue_offset_and_reconsume(bad)
