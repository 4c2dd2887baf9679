"""Checkpoint mode: what consumers may read.

A write is kept, whatever fails, once the consistent checkpoint covers it (it is on the
master's disk and every member slave's) or the control node has cached it (a new master
replays it, S3-5). A write that is neither may be rolled back by a failover (S3-6).
Consumers read only up to the end of the longest run of kept writes, so nothing they read
is taken back. Before, a consumer could read past the new master's log: its offset then
lay past the queue's end there, which sends a consumer back to the queue's start (every
message read again), and the messages the new master wrote at those offsets were skipped
by one that came later.

A promoted master starts from the end of its log (what it took over and replayed is the
group's history now, S3-5). A master without member slaves has only the control node's cache to acknowledge with, and
its own writes (due delayed messages, transaction decisions) are never cached: it shows
everything it holds, as RocketMQ's master does, until a member joins again."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...store import MessageStore


@dataclass(slots=True)
class Write:
    end: int  # commit-log offset just past it
    kept: bool


class KeptWrites:
    """One master's writes since it began leading, in log order, until they are kept."""

    def __init__(self, store: MessageStore, checkpoint: int, has_members: bool) -> None:
        self.store = store
        self.checkpoint = checkpoint
        self.alone = not has_members
        self._writes: deque[Write] = deque()  # past the bound
        self._advance()

    def appended(self, end: int) -> Write:
        """A write ending at `end` is in the log: its handle for `kept`."""
        entry = Write(end, self.alone)
        self._writes.append(entry)
        if self.alone:
            self._advance()
        return entry

    def kept(self, entry: Write) -> None:
        """The control node cached the write, or the checkpoint covered it."""
        entry.kept = True
        self._advance()

    def checkpoint_saved(self, checkpoint: int, has_members: bool) -> None:
        """The master saved a new checkpoint (or member list): consumers may read to it."""
        self.checkpoint = max(self.checkpoint, checkpoint)
        self.alone = not has_members
        if self.alone:
            for entry in self._writes:
                entry.kept = True
        self._advance()

    def _advance(self) -> None:
        bound, writes = self.checkpoint, self._writes
        while writes and (writes[0].kept or writes[0].end <= self.checkpoint):
            bound = max(bound, writes.popleft().end)
        if self.alone:  # (nothing to wait for: the end of the log, writes or not)
            bound = self.store.commitlog.max_offset
        self.store.set_dispatch_bound(bound)
