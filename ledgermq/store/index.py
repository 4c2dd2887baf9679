"""Message-key index in RocketMQ's IndexFile layout.

    header  40 bytes: beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset (8 each),
                      hashSlotCount, indexCount (4 each)
    slots   maxHashSlotNum x 4 bytes: number of the newest entry hashed to the slot
    entries maxIndexNum x 20 bytes: keyHash (4), phyOffset (8), timeDiff seconds (4),
                      previous entry number in the same slot (4)

Keys are "topic#key" for each KEYS value and the UNIQ_KEY. Entry number 0 is unused, so a
zero slot means empty. A full file is followed by a new one named by its creation time.
Lookups return candidate offsets only: the caller checks the message's real keys (hash
collisions), and duplicates from a re-index after recovery are dropped by offset.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

from .mapped_file import fsync_dir
from .message import java_string_hash

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20


def java_hash(key: str) -> int:
    """RocketMQ's non-negative key hash (abs of the Java hash code; MIN_VALUE maps to 0)."""
    h = java_string_hash(key)
    return 0 if h == -(1 << 31) else abs(h)


class IndexFile:
    def __init__(self, path: Path, slots: int, max_entries: int, *, create: bool):
        self.path = path
        self.slots = slots
        self.max_entries = max_entries
        size = HEADER_SIZE + slots * SLOT_SIZE + max_entries * ENTRY_SIZE
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if create:
                os.posix_fallocate(fd, 0, size)
            if os.fstat(fd).st_size != size:
                raise ValueError(f"index file {path} does not match maxHashSlotNum/maxIndexNum")
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        (self.begin_ts, self.end_ts, self.begin_phys, self.end_phys, _,
         self.count) = HEADER.unpack_from(self.mm, 0)
        if self.count == 0:
            self.count = 1
        self.entries_at = HEADER_SIZE + slots * SLOT_SIZE

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    def put(self, key: str, phys: int, store_ts: int) -> bool:
        if self.full:
            return False
        h = java_hash(key)
        slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
        prev = struct.unpack_from(">i", self.mm, slot_pos)[0]
        if self.begin_ts == 0:
            self.begin_ts, self.begin_phys = store_ts, phys
        diff = max(0, (store_ts - self.begin_ts) // 1000)
        ENTRY.pack_into(self.mm, self.entries_at + self.count * ENTRY_SIZE, h, phys,
                        min(diff, 0x7FFFFFFF), prev)
        struct.pack_into(">i", self.mm, slot_pos, self.count)
        self.count += 1
        self.end_ts, self.end_phys = max(self.end_ts, store_ts), max(self.end_phys, phys)
        return True

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_ts, self.end_ts, self.begin_phys,
                         self.end_phys, self.slots, self.count)

    def lookup(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        h = java_hash(key)
        out: list[int] = []
        n = struct.unpack_from(">i", self.mm, HEADER_SIZE + (h % self.slots) * SLOT_SIZE)[0]
        seen = 0
        while 0 < n < self.count and len(out) < max_num and seen < self.max_entries:
            eh, phys, diff, prev = ENTRY.unpack_from(self.mm, self.entries_at + n * ENTRY_SIZE)
            ts = self.begin_ts + diff * 1000
            if eh == h and begin_ms - 999 <= ts <= end_ms:
                out.append(phys)
            if prev >= n:
                break  # never follow a chain forward: guards against a damaged file
            n = prev
            seen += 1
        return out

    def flush(self) -> None:
        self.write_header()
        self.mm.flush()

    def close(self) -> None:
        self.write_header()
        self.mm.close()


class IndexService:
    """The set of index files of a store, newest last."""

    def __init__(self, directory: Path, slots: int, max_entries: int):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.slots = slots
        self.max_entries = max_entries
        self.files = [IndexFile(p, slots, max_entries, create=False)
                      for p in sorted(self.dir.iterdir()) if p.name.isdigit()]
        self.dirty = False

    def put(self, topic: str, keys: list[str], phys: int, store_ts: int) -> None:
        for k in keys:
            f = self.files[-1] if self.files else None
            if f is None or f.full:
                f = self._new_file()
            f.put(f"{topic}#{k}", phys, store_ts)
        self.dirty = True

    def _new_file(self) -> IndexFile:
        name = f"{time.time_ns() // 1000:020d}"
        f = IndexFile(self.dir / name, self.slots, self.max_entries, create=True)
        fsync_dir(self.dir)
        self.files.append(f)
        return f

    def lookup(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
               end_ms: int = 1 << 62) -> list[int]:
        out: list[int] = []
        for f in reversed(self.files):
            if f.end_ts and f.end_ts < begin_ms:
                break
            for phys in f.lookup(f"{topic}#{key}", max_num - len(out), begin_ms, end_ms):
                if phys not in out:
                    out.append(phys)
            if len(out) >= max_num:
                break
        return out

    def flush(self) -> None:
        if self.dirty and self.files:
            self.dirty = False
            self.files[-1].flush()

    def delete_below(self, log_min: int) -> int:
        """Delete index files whose every entry points below the commit log's start."""
        n = 0
        while len(self.files) > 1 and self.files[0].end_phys < log_min:
            f = self.files.pop(0)
            f.close()
            f.path.unlink(missing_ok=True)
            n += 1
        return n

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
