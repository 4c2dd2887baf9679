"""A short run of messages (a replica's entry, a DLedger commit) dispatched entry by entry
leaves the consume queues and index files byte for byte as the array way does, and wakes
the same pulls: over runs of both lengths' ways, queue and index files crossed, keys or
none, one store time or one a message."""
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.store import MessageStore
from ledgermq.store import dispatch

from .conftest import small_config
from .test_single_append import files_of

RUN = st.tuples(st.sampled_from(["T", "U"]), st.integers(0, 2),
                st.lists(st.tuples(st.integers(40, 300), st.integers(-3, 3),
                                   st.sampled_from([[], ["k1"], ["k1", "k2"]])),
                         min_size=1, max_size=dispatch.FEW + 4),
                st.booleans(), st.booleans())


def dispatched(root: Path, runs, few: int) -> tuple[list, dict[str, bytes]]:
    woken: list[tuple[str, int, int]] = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dispatch, "FEW", few)
        names = iter(range(10**15, 10**16))  # index files named alike in both stores
        m.setattr("ledgermq.store.index.time.time_ns", lambda: next(names) * 1000)
        store = MessageStore(small_config(root, maxHashSlotNum=16, maxIndexNum=40))
        store.open()
        store.listeners.append(lambda *a: woken.append(a))
        next_offset: dict[tuple[str, int], int] = {}
        phys_at = 0
        try:
            with store._lock:
                for topic, qid, msgs, as_arrays, one_ts in runs:
                    first = next_offset.get((topic, qid), 0)
                    next_offset[(topic, qid)] = first + len(msgs)
                    sizes = [size for size, _, _ in msgs]
                    phys = list(np.cumsum([0] + sizes[:-1]) + phys_at)
                    phys_at += sum(sizes)
                    tags = [tag for _, tag, _ in msgs]
                    ts: object = 1_700_000_000_000 + phys_at if one_ts else \
                        [1_700_000_000_000 + 999 * p for p in phys]
                    keys = [k for _, _, k in msgs]
                    if as_arrays:
                        phys, sizes, tags = (np.array(a, np.int64) for a in (phys, sizes, tags))
                        ts = ts if one_ts else np.array(ts, np.int64)
                    else:
                        phys, sizes, tags = tuple(map(int, phys)), tuple(sizes), tuple(tags)
                        ts = ts if one_ts else tuple(ts)  # type: ignore[arg-type]
                    store._dispatch_fields(topic, qid, first, phys, sizes, tags, ts,
                                           keys if any(keys) else None)
            store._flush_dispatch_and_checkpoint()
            return woken, files_of(root)
        finally:
            store.close()


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(RUN, min_size=1, max_size=25))
def test_runs_dispatched_entry_by_entry_match_the_array_way(tmp_path_factory, runs):
    few = dispatched(tmp_path_factory.mktemp("few"), runs, dispatch.FEW)
    arrays = dispatched(tmp_path_factory.mktemp("arrays"), runs, 0)
    assert few[0] == arrays[0]  # the same pulls woken, with the same queue ends
    assert few[1] == arrays[1]


def test_an_index_that_refuses_leaves_the_run_readable(tmp_path, monkeypatch, caplog):
    """A full disk refusing a new index file: every message of the run still gets its
    queue entry and wakes pulls; the messages left unindexed are logged once a run."""
    store = MessageStore(small_config(tmp_path))
    store.open()
    try:
        def refuse(*_):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(store.index, "put", refuse)
        monkeypatch.setattr(store.index, "put_many", refuse)
        woken: list = []
        store.listeners.append(lambda *a: woken.append(a))
        with store._lock:
            for first, n in ((0, 3), (3, dispatch.FEW + 4)):
                phys = tuple(range(first * 100, (first + n) * 100, 100))
                store._dispatch_fields("T", 0, first, phys, (100,) * n, (0,) * n,
                                       1_700_000_000_000, [["k"]] * n)
        assert store.queues[("T", 0)].max_offset == 3 + dispatch.FEW + 4
        assert woken == [("T", 0, 3), ("T", 0, 3 + dispatch.FEW + 4)]
        logged = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
        assert [m.split(" messages")[0] for m in logged] == \
            ["index entries for 3", f"index entries for {dispatch.FEW + 4}"]
    finally:
        store.close()
