"""The replica walk (vectorized for many messages, scanned_columns for a few) agrees with
the careful one, on good and damaged ranges."""
import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.wire.batch import encode_batch, fill_positions
from ledgermq.wire.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, encode_properties
from ledgermq.wire.scan import CORRUPT, walk
from ledgermq.wire.scan_batch import batch_from_messages, walk_batch

pytestmark = pytest.mark.usefixtures("wire_impl")  # compiled and pure twins

text = st.text(alphabet="abcXY_-", min_size=1, max_size=6)
props = st.fixed_dictionaries({}, optional={"TAGS": text, "KEYS": text, "UNIQ_KEY": text,
                                            "XTAGS": text})
runs = st.lists(st.tuples(st.sampled_from(["T1", "T2"]), st.integers(0, 3),
                          st.lists(st.tuples(st.binary(max_size=30), props), min_size=1,
                                   max_size=5)), min_size=1, max_size=4)


def build(spec, base=1000):
    buf, qoffs = bytearray(), {}
    for topic, qid, msgs in spec:
        b = encode_batch(topic, qid, [m for m, _ in msgs],
                         [encode_properties(p) for _, p in msgs],
                         [p.get("TAGS") for _, p in msgs])
        first = qoffs.get((topic, qid), 0)
        fill_positions(b, 0, len(b), base + len(buf), first, 1234)
        qoffs[(topic, qid)] = first + len(b)
        buf += b.buf
    return bytes(buf)


def same(data, base=1000, damage=None):
    view = memoryview(bytearray(data))
    if damage is not None:
        view[damage % len(view)] ^= 0x5A
    msgs = []
    slow = walk(view, 0, len(view), base, len(view) + 64, out=msgs)
    b = batch_from_messages(msgs)
    for few in (0, 1000):  # numpy's walk; a few messages' (scanned_columns)
        fast = walk_batch(view, 0, len(view), base, len(view) + 64, few=few)
        assert fast[:3] == slow
        a = fast[3]
        for field in ("phys", "sizes", "queue_ids", "queue_offsets", "store_timestamps",
                      "tag_codes"):
            assert list(getattr(a, field)) == list(getattr(b, field)), field
        assert a.topics == b.topics and a.index_keys == b.index_keys


@settings(max_examples=150, deadline=None)
@given(runs)
def test_walks_agree_on_good_ranges(spec):
    same(build(spec))


@settings(max_examples=150, deadline=None)
@given(runs, st.integers(0, 10_000))
def test_walks_agree_on_damaged_ranges(spec, where):
    same(build(spec), damage=where)


def test_host_flags_that_stretch_the_header_past_the_message_are_corruption():
    """A damaged SYSFLAG claiming IPv6 hosts makes the header 24 bytes longer: the walk
    must call the message corrupt, not read past it (the range may end right there)."""
    data = bytearray(build([("T1", 0, [(b"\x00", {})])]))
    data[36 + 3] |= SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
    stop, reason, detail = walk(memoryview(data), 0, len(data), 1000, len(data))
    assert (stop, reason) == (0, CORRUPT) and "TOTALSIZE" in detail
    same(bytes(data))
