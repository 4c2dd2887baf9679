"""StoreRaftLog, the DLedger-mode Raft log kept in the commit log: an entry read back is
the one the log holds now (after a cut and a different entry at the same index), terms are
read without the bytes, and no entry it keeps in memory holds the mapping of a segment
retention deleted."""
import os
import time

from ledgermq.drivers.dledger_log import StoreRaftLog
from ledgermq.replication.raft import Entry
from ledgermq.store import MessageStore

from ..store.conftest import small_config


def open_log(tmp_path) -> tuple[MessageStore, StoreRaftLog]:
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    return store, StoreRaftLog(store, tmp_path / "raft")


def propose(store: MessageStore, log: StoreRaftLog, term: int, body: bytes) -> Entry:
    """What the leader's driver does for one send: append, then log the range as an entry."""
    start = store.commitlog.max_offset
    assert store.append(store.encode("T", 0, [body])).ok
    e = Entry(log.end + 1, term, log.span(start, store.commitlog.max_offset))
    log.append((e,))
    log.write_entries((e,))
    return e


def test_an_entry_read_after_a_cut_is_the_one_written_there_since(tmp_path):
    store, log = open_log(tmp_path)
    try:
        propose(store, log, 1, b"first")
        old = propose(store, log, 1, b"old tail")
        assert log.entry(old.index) == old and log.entry(old.index) == old  # read twice
        log.truncate_after(old.index - 1)
        log.cut_after(old.index - 1)
        new = propose(store, log, 2, b"the new leader's")
        assert new.index == old.index
        got = log.entry(new.index)
        assert got.term == 2 and bytes(got.data)[8:] == bytes(new.data)[8:]
        assert b"the new leader's" in bytes(got.data)
        assert [log.term_at(i) for i in (-1, 0, 1, 2)] == [None, 1, 2, None]
    finally:
        log.close()
        store.close()


def test_a_segment_retention_deleted_is_unmapped_though_an_entry_in_it_was_read(tmp_path):
    """An idle follower may go hours without reading an entry: what the log remembers of
    the last one read must not keep a deleted segment's mapping (and its disk space)."""
    store, log = open_log(tmp_path)
    try:
        first = propose(store, log, 1, os.urandom(1000)).index  # (the index only: the
        # entry's views are on the segment)
        assert log.entry(first) is not None  # read while its segment is the last
        segment = store.commitlog.files.files[0]
        while len(store.commitlog.files.files) < 3:
            propose(store, log, 1, os.urandom(1000))
        store.commitlog.flush()
        assert store.delete_expired(now=time.time() + 10 ** 9) > 0
        assert segment.mm.closed, "the deleted segment is still mapped"
        assert log.begin > first and log.entry(first) is None
    finally:
        log.close()
        store.close()
