"""Fake disks: what a simulated node's crash keeps.

- `SimLog`, a broker's commit log (S1, S2, S3): a flat byte string of records (4-byte
  size, 4-byte message number, payload), with a flushed mark. In S1 and S2 it survives a
  crash whole (brokers flush before they report or answer, as SYNC_FLUSH brokers do); in
  S3 a crash keeps only what was flushed, and the brokers flush by group commit before
  they report, push or answer.
- `RaftDisk`, a Raft node's durable state (S0 and the controller group): only what was
  fsynced; the simulator applies a step's persist actions to it when the driver contract
  says they are synced, and loses the rest on a crash.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from ..replication.raft import AppendEntries, Entry, ResetLog, SaveCommit, SaveMeta, TruncateAfter
from ..replication.raft.messages import PERSIST_ACTIONS

REC = struct.Struct(">ii")  # record header: size (header included), message number


class SimLog:
    def __init__(self):
        self.data = bytearray()
        self.flushed = 0  # what a crash keeps (where crashes lose unflushed bytes)

    @property
    def end(self) -> int:
        return len(self.data)

    def append(self, number: int, payload: bytes) -> tuple[int, int]:
        """Write message `number`; returns where its record starts and ends."""
        at = len(self.data)
        self.data += REC.pack(REC.size + len(payload), number) + payload
        return at, len(self.data)

    def append_prefix(self, offset: int, data: bytes) -> int:
        """A slave's write of what its master sent: the whole records of `data` only."""
        assert offset == len(self.data), (offset, len(self.data))
        pos = 0
        while pos + REC.size <= len(data):
            size = REC.unpack_from(data, pos)[0]
            if size < REC.size or pos + size > len(data):
                break  # unfinished, or not a record at all (the logs diverged: see checks)
            pos += size
        self.data += data[:pos]
        return len(self.data)

    def truncate(self, offset: int) -> None:
        del self.data[offset:]
        self.flushed = min(self.flushed, offset)

    def flush(self) -> None:
        self.flushed = len(self.data)

    def lose_unflushed(self) -> int:
        """A crash: the bytes past the flushed mark are gone; returns how many."""
        lost = len(self.data) - self.flushed
        del self.data[self.flushed:]
        return lost

    def read(self, offset: int, end: int) -> bytes:
        return bytes(self.data[offset:end])

    def messages(self) -> dict[int, int]:
        """message number -> offset"""
        out, pos = {}, 0
        while pos < len(self.data):
            size, number = REC.unpack_from(self.data, pos)
            out[number] = pos
            pos += size
        return out

    @staticmethod
    def split_record(record: bytes) -> tuple[int, bytes]:
        """(message number, payload) of one whole record."""
        return REC.unpack_from(record, 0)[1], record[REC.size:]


@dataclass
class RaftDisk:
    """What survives a Raft node's crash: only what was fsynced."""

    term: int = 0
    voted_for: str | None = None
    log: list[Entry] = field(default_factory=list)
    commit: int = -1
    # (term, index) of the last entry before damage cut the log's tail (None: undamaged)
    promised: tuple[int, int] | None = None

    def corrupt_tail(self, lose: int) -> None:
        """Damage found on restart (CRCs): the last `lose` entries, synced and maybe
        acknowledged, cannot be read back; the node keeps only what precedes them and
        remembers the log it held (its promise)."""
        last = self.log[-1]
        self.promised = max(self.promised or (-1, -1), (last.term, last.index))
        del self.log[len(self.log) - lose:]

    def promise_kept(self) -> bool:
        """Refilled past the promise (then forgotten), or never damaged."""
        mine = (self.log[-1].term, self.log[-1].index) if self.log else (0, -1)
        if self.promised is not None and mine >= self.promised:
            self.promised = None
        return self.promised is None

    def apply(self, action) -> None:
        if isinstance(action, SaveMeta):
            self.term, self.voted_for = action.term, action.voted_for
        elif isinstance(action, AppendEntries):
            self.log.extend(action.entries)
        elif isinstance(action, TruncateAfter):
            self.log = [e for e in self.log if e.index <= action.index]
        elif isinstance(action, ResetLog):
            self.log = [action.entry]
        elif isinstance(action, SaveCommit):
            self.commit = max(self.commit, action.index)

    def carry_out(self, actions: list, act: Callable[[str, object], None], node_id: str,
                  crash_at: int | None = None) -> list | None:
        """Run one step's actions under the driver contract: persist actions are fsynced
        before any later action leaves the node, the others go to `act(node_id, a)`. A crash just
        before action `crash_at` stops it: returns the persist actions it never synced
        (None when the step ran to its end)."""
        unsynced = []
        for k, a in enumerate(actions):
            if k == crash_at:
                return unsynced
            if isinstance(a, PERSIST_ACTIONS):
                unsynced.append(a)
                continue
            for u in unsynced:
                self.apply(u)
            unsynced = []
            act(node_id, a)
        for u in unsynced:
            self.apply(u)
        return None
