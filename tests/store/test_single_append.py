"""A single message written in one call with its queue entry (store/single.py) leaves the
store exactly as the general way does: the same log, queue and index bytes, the same
results, over sends that cross log segments (fillers), queue segments and index files."""
import random
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.store import MessageStore, PutStatus
from ledgermq.store.single import SingleWrites
from ledgermq.wire.batch import LOCALHOST

from .conftest import small_config

SEND = st.tuples(st.sampled_from(["T", "U"]), st.integers(0, 2), st.integers(0, 900),
                 st.sampled_from([None, "tagA", "tagB"]),
                 st.sampled_from([[], ["k1"], ["k1", "k2 k3"]]), st.integers(1, 5))


def files_of(root: Path) -> dict[str, bytes]:
    """The bytes of every commit-log segment, consume-queue file and index file (the marks
    beside them record when the flush thread last ran)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name.isdigit()}


def run(root: Path, sends, fast: bool, counted: list[int]) -> tuple:
    with pytest.MonkeyPatch.context() as m:
        general = SingleWrites._append_visible_one

        def counting(self, batch, now):
            r = general(self, batch, now) if fast else None
            counted.append(r is not None)
            return r
        m.setattr(SingleWrites, "_append_visible_one", counting)
        clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1234))
        m.setattr("ledgermq.store.store.wall_ms", lambda: next(clock))
        # index files named by creation time: the same names in both stores
        names = iter(range(10**15, 10**16))
        m.setattr("ledgermq.store.index.time.time_ns", lambda: next(names) * 1000)
        store = MessageStore(small_config(root, maxHashSlotNum=16, maxIndexNum=40))
        store.open()
        results = []
        try:
            for topic, qid, size, tag, keys, born in sends:
                props = b"KEYS\x01" + " ".join(keys).encode() + b"\x02" if keys else b""
                b = store.encode(topic, qid, [bytes([65 + size % 26]) * size], props,
                                 tag, born_timestamp=born, born_host=LOCALHOST,
                                 index_keys=[keys])
                r = store.append(b)
                assert r.status is PutStatus.PUT_OK, r.error
                results.append((tuple(int(p) for p in r.phys_offsets), r.queue_offset, r.count,
                                r.end_offset, r.store_timestamp, r.wrote_bytes))
            store._flush_dispatch_and_checkpoint()
            return results, files_of(root)
        finally:
            store.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(SEND, min_size=1, max_size=400))
def test_single_writes_equal_the_general_way(tmp_path_factory, sends):
    fast_taken: list[int] = []
    fast = run(tmp_path_factory.mktemp("fast"), sends, True, fast_taken)
    general = run(tmp_path_factory.mktemp("general"), sends, False, [])
    assert fast[0] == general[0]
    assert fast[1].keys() == general[1].keys()
    for name in fast[1]:
        assert fast[1][name] == general[1][name], name


def test_most_single_sends_take_one_write(tmp_path):
    """The differential test above compares something: on a long run of sends nearly every
    one is written in one call (only a queue's first send and one at a segment's end are
    not)."""
    rng = random.Random(7)
    sends = [("T", rng.randrange(3), rng.randrange(300), None, ["k"], 1) for _ in range(2000)]
    taken: list[int] = []
    run(tmp_path, sends, True, taken)
    assert sum(taken) >= 0.9 * len(sends)


@pytest.mark.parametrize("cut", [False, True])
def test_a_single_send_after_a_cut_lands_where_the_log_ends(make_store, cut):
    """After the log is cut back (a replica truncated), the next single send is written at
    the new end, with its queue entry at the queue's next offset."""
    store = make_store()
    for i in range(5):
        store.append(store.encode("T", 0, [b"m%d" % i], b"", None))
    if cut:
        keep = store.get_messages("T", 0, 3, max_count=1).buffers[0]
        store.truncate(store.commitlog.max_offset - len(keep) * 2)
    r = store.append(store.encode("T", 0, [b"last"], b"", None))
    g = store.get_messages("T", 0, r.queue_offset, max_count=1)
    assert g.message_count == 1 and bytes(g.messages()[0]).endswith(b"last\x01T\x00\x00")
    assert r.end_offset == store.commitlog.max_offset


@pytest.mark.parametrize("gap", range(0, 11))
def test_a_send_that_just_fits_or_just_misses_a_segment(tmp_path, gap):
    """Room left at a segment's end of the message's size plus `gap` bytes: it fits only
    with the 8 bytes an end-of-segment filler needs left over (64 KiB segments; a message
    of topic "T" without properties is its body + 92 bytes)."""
    sends = [("T", 0, 908, None, [], 1)] * 65  # 65,000 bytes
    sends += [("T", 0, 536 - 92 - gap, None, [], 1), ("T", 0, 10, None, [], 1)]
    fast = run(tmp_path / "fast", sends, True, [])
    general = run(tmp_path / "general", sends, False, [])
    assert fast == general
