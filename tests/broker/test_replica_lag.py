"""The message holding any byte of the commit log, as replica lag in seconds needs it (a
replica's offset may fall inside a message, or inside a segment's unused tail), from the
broker's notes of where the log ended, from a segment's start without notes, and never a
later message than the true one when the step limit cuts the walk short."""
import time

from ledgermq.broker import replica_lag
from ledgermq.broker.replica_lag import LogBoundaries, lag_rows
from ledgermq.store import MessageStore
from ledgermq.wire.message import Message

from ..store.conftest import small_config


def test_the_message_holding_each_offset(tmp_path, monkeypatch):
    store = MessageStore(small_config(tmp_path, mappedFileSizeCommitLog=4096))
    store.open()
    try:
        noted = LogBoundaries(store)
        spans = []  # (start, end) of each message
        for i in range(40):
            r = store.put_message(Message("T", b"x" * (60 + 13 * i)))
            start = int(r.phys_offsets[0])
            spans.append((start, start + store.commitlog.size_at(start)))
            if i % 7 == 0:
                noted.sample()
        log = store.commitlog
        assert log.max_offset > 3 * 4096  # several segments, so several unused tails

        def holding(o):
            return next(s for s, e in spans if e > o)  # in a tail: the next segment's first
        bare = LogBoundaries(store)  # no notes: every walk from the segment's start
        for o in range(log.min_offset, log.max_offset):
            assert noted.message_at(o) == holding(o), o
            if o % 97 == 0:
                assert bare.message_at(o) == holding(o), o
        assert noted.message_at(log.max_offset) is None  # it holds everything
        monkeypatch.setattr(replica_lag, "MAX_STEPS", 2)
        starts = [s for s, _ in spans]
        for o in range(log.min_offset, log.max_offset, 31):
            got = bare.message_at(o)
            assert got in starts and got <= holding(o)
    finally:
        store.close()


def test_lag_rows_in_bytes_and_seconds(tmp_path):
    store = MessageStore(small_config(tmp_path))
    store.open()
    try:
        first = store.put_message(Message("T", b"a" * 100))
        store.put_message(Message("T", b"b" * 100))
        bounds = LogBoundaries(store)
        end = store.commitlog.max_offset
        rows = {(name, labels["replica"]): v for name, _, labels, v in
                lag_rows(bounds, {"caught-up": end, "behind": first.end_offset - 10})}
        assert rows[("ledgermq_replica_lag_bytes", "caught-up")] == 0
        assert rows[("ledgermq_replica_lag_seconds", "caught-up")] == 0
        assert rows[("ledgermq_replica_lag_bytes", "behind")] == end - first.end_offset + 10
        # its oldest missing message is the first one (it lacks that one's last 10 bytes)
        age = time.time() - first.store_timestamp / 1000
        assert abs(rows[("ledgermq_replica_lag_seconds", "behind")] - age) < 0.05
    finally:
        store.close()
