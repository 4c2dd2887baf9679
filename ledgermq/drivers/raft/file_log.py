"""A Raft log in one append-only file (the controller's: small entries, few of them).

Records are (index, term, length) + data. The core edits the in-memory list (MemoryLog);
the driver calls write_entries / cut_after / sync for its persist actions. A torn last
record (a crash mid-write) is dropped on load.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

from ...replication.raft import Entry
from ...replication.raft.log import MemoryLog

_REC = struct.Struct(">qqi")


class FileRaftLog(MemoryLog):
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        raw = self.path.read_bytes() if self.path.exists() else b""
        entries, self._pos, pos = [], {}, 0  # index -> where its record starts
        while pos + _REC.size <= len(raw):
            index, term, n = _REC.unpack_from(raw, pos)
            if pos + _REC.size + n > len(raw) or (entries and index != entries[-1].index + 1):
                break
            self._pos[index] = pos
            entries.append(Entry(index, term, raw[pos + _REC.size:pos + _REC.size + n]))
            pos += _REC.size + n
        super().__init__(entries)
        self._file = open(self.path, "r+b" if raw else "w+b")
        self._file.truncate(pos)
        self._end = pos

    def write_entries(self, entries) -> None:
        for e in entries:
            if e.index in self._pos:  # rewritten after a truncation we had not persisted
                self._cut_at(self._pos[e.index])
                self._pos = {i: p for i, p in self._pos.items() if i < e.index}
            self._file.seek(self._end)
            self._file.write(_REC.pack(e.index, e.term, len(e.data)) + e.data)
            self._pos[e.index] = self._end
            self._end += _REC.size + len(e.data)

    def cut_after(self, index: int) -> None:
        later = [i for i in self._pos if i > index]
        if later:
            self._cut_at(self._pos[min(later)])
            for i in later:
                del self._pos[i]
        self.sync()

    def write_reset(self, entry) -> None:
        """Durably replace the whole log with `entry` (the core's ResetLog)."""
        self.cut_after(-1)
        self.write_entries((entry,))

    def _cut_at(self, pos: int) -> None:
        self._file.truncate(pos)
        self._end = pos

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()
