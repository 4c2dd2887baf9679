"""Writes a replica takes from its leader or master: raw commit-log bytes appended at a
given offset, the log cut back to where it agrees with the leader's, and a restart empty
at the leader's first offset when retention left nothing to catch up from.

Replicated bytes are dispatched as local appends are: at once when dispatch follows the
log, else as the replication mode raises the dispatch bound (set_dispatch_bound).
"""
from __future__ import annotations

import logging
from collections import deque

from .dispatch import DispatchRun, runs_from_batch
from .mapped_file import StoreError

log = logging.getLogger(__name__)


class ReplicaWrites:
    """Mixed into MessageStore."""

    def start_at(self, offset: int) -> None:
        """An empty store's log begins at `offset` (see CommitLog.start_at)."""
        with self._lock:
            self.commitlog.start_at(offset)
            self.dispatch_bound = self.dispatched_offset = offset
            self._flush_dispatch_and_checkpoint()

    def restart_at(self, offset: int) -> None:
        """Begin afresh at `offset` (a segment start) with every segment and consume queue
        dropped: a replica whose leader no longer holds the entries that would bring it
        up to date (retention deleted them) starts over at the leader's first entry. The
        store must hold no messages (truncate it first)."""
        with self._lock:
            if self.commitlog.max_offset != self.commitlog.min_offset:
                raise StoreError(f"cannot restart at {offset}: the store still holds "
                                 f"{self.commitlog.min_offset}-{self.commitlog.max_offset}")
            log.warning("restarting the store empty at offset %d", offset)
            for cq in self.queues.values():
                cq.destroy()
            self.queues.clear()
            self._next_queue_offset.clear()
            self._pending.clear()
            self.commitlog.clear()
            self._flusher.lower_to(0)
            self.start_at(offset)

    def append_raw(self, offset: int, data, *, partial_tail: bool = False) -> int:
        """Append replicated bytes at `offset`; returns the new end of the log. With
        `partial_tail`, an unfinished last message is left out (the HA stream splits
        messages anywhere)."""
        with self._lock:
            batches = self.commitlog.append_raw(offset, data, partial_tail=partial_tail)
            for run in (r for b in batches for r in runs_from_batch(b)):
                self._queue_pending(run)
            end = self.commitlog.max_offset
            if self.dispatch_follows_log:
                self._set_bound(end)
            return end

    def truncate(self, offset: int) -> None:
        """Cut the log (and consume queues) back to `offset`, crash-safely (replication)."""
        with self._lock:
            self.commitlog.truncate(offset)
            self._flusher.lower_to(offset)
            # the next queue offsets, again from what is left: a queue whose every entry
            # was cut before it was dispatched starts again at 0
            self._next_queue_offset.clear()
            for cq in self.queues.values():
                cq.truncate_from_phys(offset)
                self._next_queue_offset[(cq.topic, cq.queue_id)] = cq.max_offset
            kept: deque[DispatchRun] = deque()
            for run in self._pending:
                below, _ = run.split(offset)
                if below is not None:
                    kept.append(below)
                    key = (below.topic, below.queue_id)
                    self._next_queue_offset[key] = below.first_queue_offset + len(below.phys)
            self._pending = kept
            self.dispatch_bound = min(self.dispatch_bound, offset)
            self.dispatched_offset = min(self.dispatched_offset, offset)
            self._flush_dispatch_and_checkpoint()
