"""Dispatch: turning commit-log messages into consume-queue entries, index records and
pull wake-ups.

Messages are dispatched in log order, and only up to the dispatch bound (by default the
end of the log; under replication the committed offset). What lies past the bound waits
in `_pending` as DispatchRuns: consecutive messages of one queue, split where the bound
falls. `dispatched_offset` is the log offset below which everything is dispatched.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..wire.scan import ScannedMessage
from ..wire.scan_batch import ScannedBatch, batch_from_messages
from .consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

# runs of up to this many messages are dispatched entry by entry: numpy's arrays cost
# ~15 µs a run however short, a message written on its own ~1.2 µs
FEW = 16


@dataclass
class DispatchRun:
    """Consecutive messages of one queue, waiting for the dispatch bound to pass them."""

    topic: str
    queue_id: int
    first_queue_offset: int
    phys: np.ndarray
    sizes: np.ndarray
    tags: np.ndarray
    store_timestamps: np.ndarray | int
    index_keys: list[list[str]] | None
    end: int = -1  # commit-log offset just past the run's last message

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = int(self.phys[-1] + self.sizes[-1])

    def split(self, bound: int) -> tuple["DispatchRun | None", "DispatchRun | None"]:
        """(the part whose messages end at or below `bound`, the rest)."""
        if self.end <= bound:
            return self, None
        if bound < self.phys[0] + self.sizes[0]:  # not even the first (a follower's entry
            return None, self  # waiting for its commit): no search
        k = int(np.searchsorted(np.add(self.phys, self.sizes), bound, side="right"))
        if k == len(self.phys):
            return self, None
        if k == 0:
            return None, self

        def part(sl: slice, first: int) -> DispatchRun:
            ts = self.store_timestamps
            return DispatchRun(self.topic, self.queue_id, first, self.phys[sl], self.sizes[sl],
                               self.tags[sl], ts if isinstance(ts, int) else ts[sl],
                               self.index_keys[sl] if self.index_keys else None)

        return (part(slice(0, k), self.first_queue_offset),
                part(slice(k, None), self.first_queue_offset + k))


def runs_from_batch(b: ScannedBatch) -> list[DispatchRun]:
    """Split scanned messages into runs of one queue with consecutive queue offsets."""
    n = len(b)
    if n == 0:
        return []
    if isinstance(b.phys, tuple):
        return _runs_of_few(b)
    if b.topics.count(b.topics[0]) == n:
        topic_change = np.zeros(n - 1, bool)
    else:
        topic_change = np.fromiter((b.topics[i] != b.topics[i + 1] for i in range(n - 1)),
                                   bool, n - 1)
    breaks = np.nonzero(topic_change | (b.queue_ids[1:] != b.queue_ids[:-1]) |
                        (b.queue_offsets[1:] != b.queue_offsets[:-1] + 1))[0] + 1
    runs = []
    for lo, hi in zip([0, *breaks.tolist()], [*breaks.tolist(), n]):
        keys = b.index_keys[lo:hi]
        runs.append(DispatchRun(b.topics[lo], int(b.queue_ids[lo]), int(b.queue_offsets[lo]),
                                b.phys[lo:hi], b.sizes[lo:hi], b.tag_codes[lo:hi],
                                b.store_timestamps[lo:hi], keys if any(keys) else None))
    return runs


def _runs_of_few(b: ScannedBatch) -> list[DispatchRun]:
    """runs_from_batch for a batch of tuples, in plain Python."""
    runs, lo, n = [], 0, len(b)
    for hi in range(1, n + 1):
        if hi < n and b.topics[hi] == b.topics[lo] and b.queue_ids[hi] == b.queue_ids[lo] \
                and b.queue_offsets[hi] == b.queue_offsets[hi - 1] + 1:
            continue
        keys = b.index_keys[lo:hi]
        runs.append(DispatchRun(b.topics[lo], b.queue_ids[lo], b.queue_offsets[lo],
                                b.phys[lo:hi], b.sizes[lo:hi], b.tag_codes[lo:hi],
                                b.store_timestamps[lo:hi], keys if any(keys) else None))
        lo = hi
    return runs


def runs_from_scan(msgs: Sequence[ScannedMessage]) -> list[DispatchRun]:
    return runs_from_batch(batch_from_messages(list(msgs)))

class QueueDispatch:
    """Mixed into MessageStore; the underscored methods run under the store's lock."""

    queues: dict[tuple[str, int], ConsumeQueue]
    _next_queue_offset: dict[tuple[str, int], int]  # the next message's offset, per queue
    _pending: deque[DispatchRun]  # in log order, all past the dispatch bound
    dispatch_bound: int
    dispatched_offset: int
    listeners: list[Callable[[str, int, int], None]]  # (topic, queue id, max offset)

    def _queue_pending(self, run: DispatchRun) -> None:
        """Hold back a run found in the log (recovery, replication) until the bound passes
        it; its queue's next offset moves past it at once."""
        key = (run.topic, run.queue_id)
        self._next_queue_offset[key] = max(self._next_queue_offset.get(key, 0),
                                           run.first_queue_offset + len(run.phys))
        self._pending.append(run)

    def set_dispatch_bound(self, offset: int) -> None:
        """Make messages ending at or below `offset` visible to consumers."""
        with self._lock:
            self._set_bound(min(offset, self.commitlog.max_offset))

    def _set_bound(self, bound: int) -> None:
        if bound < self.dispatch_bound:
            return
        self.dispatch_bound = bound
        while self._pending:
            run = self._pending[0]
            below, rest = run.split(bound)
            if below is None:
                break
            self._dispatch(below)
            if rest is None:
                self._pending.popleft()
            else:
                self._pending[0] = rest
                break
        self.dispatched_offset = int(self._pending[0].phys[0]) if self._pending else bound

    def _dispatch(self, run: DispatchRun) -> None:
        self._dispatch_fields(run.topic, run.queue_id, run.first_queue_offset, run.phys,
                              run.sizes, run.tags, run.store_timestamps, run.index_keys)

    def _dispatch_fields(self, topic: str, queue_id: int, first_queue_offset: int, phys,
                         sizes, tags, store_timestamps, index_keys) -> None:
        """Consume-queue entries, index records and pull wake-ups for consecutive messages
        of one queue."""
        cq = self.queues.get((topic, queue_id)) or self._open_queue(topic, queue_id)
        if len(phys) <= FEW:
            self._dispatch_few(cq, first_queue_offset, phys, sizes, tags, store_timestamps,
                               index_keys)
            return
        cq.put(first_queue_offset, phys, sizes, tags)
        if self.index is not None and index_keys:
            try:
                self._index_many(topic, phys, store_timestamps, index_keys)
            except OSError as e:
                self._index_failed(topic, len(phys), e)
        for listener in self.listeners:
            listener(topic, queue_id, cq.max_offset)

    def _dispatch_few(self, cq: ConsumeQueue, first_queue_offset: int, phys, sizes, tags,
                      store_timestamps, index_keys) -> None:
        """_dispatch_fields for a run of at most FEW messages (what a replica's entry or a
        DLedger commit usually brings): entry by entry, without numpy's per-call cost."""
        one_ts = store_timestamps if isinstance(store_timestamps, int) else None
        index = self.index if index_keys else None
        for i in range(len(phys)):
            p = int(phys[i])
            cq.put_one(first_queue_offset + i, p, int(sizes[i]), int(tags[i]))
            if index is not None and index_keys[i]:
                ts = one_ts if one_ts is not None else int(store_timestamps[i])
                if not self._index_one(cq.topic, index_keys[i], p, ts, len(phys) - i):
                    index = None  # (the rest of the run is counted in its log line)
        for listener in self.listeners:
            listener(cq.topic, cq.queue_id, cq.max_offset)

    def _index_and_wake(self, cq: ConsumeQueue, phys: int, store_timestamp: int,
                        index_keys: list[str] | None) -> None:
        """The rest of one message's dispatch, its queue entry written: its index keys,
        and the pulls waiting on its queue."""
        if self.index is not None and index_keys:
            self._index_one(cq.topic, index_keys, phys, store_timestamp)
        for listener in self.listeners:
            listener(cq.topic, cq.queue_id, cq.max_offset)

    def _index_one(self, topic: str, keys: list[str], phys: int, store_timestamp: int,
                   left: int = 1) -> bool:
        """One message's index keys; False (logged for the `left` messages it stops) when
        the index cannot take them."""
        try:
            self.index.put(topic, keys, phys, store_timestamp)
            return True
        except OSError as e:
            self._index_failed(topic, left, e)
            return False

    @staticmethod
    def _index_failed(topic: str, n: int, e: OSError) -> None:
        # a new index file on a full disk: the log and queues hold the messages
        log.error("index entries for %d messages of %s not written (lookups by key miss "
                  "them): %s", n, topic, e)

    def _index_many(self, topic: str, phys, store_timestamps, index_keys) -> None:
        counts = np.fromiter(map(len, index_keys), np.int64, len(index_keys))
        keys = [k for ks in index_keys for k in ks]
        ts = store_timestamps
        ts = np.full(len(phys), ts, np.int64) if isinstance(ts, int) else ts
        self.index.put_many(topic, keys, np.repeat(phys, counts), np.repeat(ts, counts))

    def _open_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(self.root / "consumequeue" / topic / str(queue_id), topic, queue_id,
                          self.config.entries_per_cq_file)
        self.queues[(topic, queue_id)] = cq
        return cq
