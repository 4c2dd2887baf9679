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

import numpy as np

from ..runtime.files import fsync_dir
from ..wire.hashes import java_string_hash, java_string_hashes
from ..wire.native import twin

ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
_I4 = struct.Struct(">i")


def java_hash(key: str) -> int:
    """RocketMQ's non-negative key hash (abs of the Java hash code; MIN_VALUE maps to 0)."""
    h = java_string_hash(key)
    return 0 if h == -(1 << 31) else abs(h)


def java_hashes(keys: list[str]) -> np.ndarray:
    h = java_string_hashes(keys)
    return np.where(h == -(1 << 31), 0, np.abs(h))


@twin("index_put")
def index_put(mm, heads_at: int, slots: int, entries_at: int, first_num: int,
              hashes: np.ndarray, phys: np.ndarray, diffs: np.ndarray) -> None:
    """Write entries first_num, first_num+1, ... (hash, phys, time diff, prev) into `mm` at
    `entries_at` and chain each into its hash slot (the big-endian int32 heads at
    `heads_at`), vectorized. Each slot keeps a chain newest-first: an entry's `prev` is
    the entry before it in the same slot within this call, or the slot's head before it."""
    n = len(hashes)
    if len(phys) != n or len(diffs) != n:
        raise ValueError("hashes, phys and diffs differ in length")
    if slots <= 0 or min(heads_at, entries_at, first_num) < 0 or \
            heads_at + slots * SLOT_SIZE > len(mm) or \
            entries_at + (first_num + n) * ENTRY_SIZE > len(mm):
        raise ValueError("index entries do not fit the buffer")
    nums = np.arange(first_num, first_num + n, dtype=np.int64)
    slot = hashes % slots
    heads = np.frombuffer(mm, ">i4", slots, heads_at)
    order = np.argsort(slot, kind="stable")
    s_sorted, n_sorted = slot[order], nums[order]
    first_in_slot = np.ones(n, bool)
    first_in_slot[1:] = s_sorted[1:] != s_sorted[:-1]
    prev_sorted = np.empty(n, np.int64)
    prev_sorted[1:] = n_sorted[:-1]
    prev_sorted[first_in_slot] = heads[s_sorted[first_in_slot]]
    entries = np.empty(n, ENTRY_DTYPE)
    entries["hash"] = hashes
    entries["phys"] = phys
    entries["diff"] = diffs
    entries["prev"][order] = prev_sorted
    at = entries_at + first_num * ENTRY_SIZE
    mm[at:at + n * ENTRY_SIZE] = entries.tobytes()
    last_in_slot = np.ones(n, bool)
    last_in_slot[:-1] = s_sorted[1:] != s_sorted[:-1]
    heads[s_sorted[last_in_slot]] = n_sorted[last_in_slot]


@twin("index_put_key")
def index_put_key(mm, heads_at: int, slots: int, entries_at: int, num: int, topic: str,
                  key: str, phys: int, diff: int) -> None:
    """Entry `num` for `key` of `topic` (the hash of "topic#key", phys, time diff, prev)
    written into `mm` and chained into its hash slot: one message's index_put, hashing
    included (the single-send path)."""
    if slots <= 0 or min(heads_at, entries_at, num) < 0 or \
            heads_at + slots * SLOT_SIZE > len(mm) or \
            entries_at + (num + 1) * ENTRY_SIZE > len(mm):
        raise ValueError("the index entry does not fit the buffer")
    h = java_hash(f"{topic}#{key}")
    slot_pos = heads_at + (h % slots) * SLOT_SIZE
    ENTRY.pack_into(mm, entries_at + num * ENTRY_SIZE, h, phys, diff,
                    _I4.unpack_from(mm, slot_pos)[0])
    _I4.pack_into(mm, slot_pos, num)


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

    def put_key(self, topic: str, key: str, phys: int, ts: int) -> None:
        """One entry (the single-message path, without numpy's per-call overhead)."""
        if self.begin_ts == 0:
            self.begin_ts, self.begin_phys = ts, phys
        index_put_key(self.mm, HEADER_SIZE, self.slots, self.entries_at, self.count, topic,
                      key, phys, min(max(0, (ts - self.begin_ts) // 1000), 0x7FFFFFFF))
        self.count += 1
        if ts > self.end_ts:
            self.end_ts = ts
        if phys > self.end_phys:
            self.end_phys = phys

    def put_many(self, hashes: np.ndarray, phys: np.ndarray, ts: np.ndarray) -> int:
        """Add as many entries as fit (vectorized); returns how many were added.

        Each slot keeps a chain newest-first: an entry's `prev` is the entry before it in
        the same slot within this call, or the slot's head before the call.
        """
        n = min(len(hashes), self.max_entries - self.count)
        if n <= 0:
            return 0
        hashes, phys, ts = hashes[:n], phys[:n], ts[:n]
        if self.begin_ts == 0:
            self.begin_ts, self.begin_phys = int(ts[0]), int(phys[0])
        # (ufuncs: np.clip's wrappers cost a batch of 100 more than the arithmetic)
        diffs = np.minimum(np.maximum((ts - self.begin_ts) // 1000, 0), 0x7FFFFFFF)
        index_put(self.mm, HEADER_SIZE, self.slots, self.entries_at, self.count,
                  *(np.ascontiguousarray(a, np.int64) for a in (hashes, phys, diffs)))
        self.count += n
        self.end_ts = max(self.end_ts, int(ts.max()))
        self.end_phys = max(self.end_phys, int(phys.max()))
        return n

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

    def occupied(self, hashes: np.ndarray) -> np.ndarray:
        """Per hash: does its slot hold a chain at all (False: the key is surely absent)."""
        heads = np.frombuffer(self.mm, ">i4", self.slots, HEADER_SIZE)[hashes % self.slots]
        return (heads > 0) & (heads < self.count)

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
        """The keys of one message."""
        for k in keys:
            f = self.files[-1] if self.files else None
            if f is None or f.full:
                f = self._new_file()
            f.put_key(topic, k, phys, store_ts)
        self.dirty = True

    def put_many(self, topic: str, keys: list[str], phys: np.ndarray, ts: np.ndarray) -> None:
        """Index `keys` of `topic` (key i points at phys[i], stored at ts[i])."""
        if not keys:
            return
        hashes = java_hashes([f"{topic}#{k}" for k in keys])
        done = 0
        while done < len(keys):
            f = self.files[-1] if self.files else None
            if f is None or f.full:
                f = self._new_file()
            done += f.put_many(hashes[done:], phys[done:], ts[done:])
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

    def maybe_present(self, topic: str, keys: list[str]) -> np.ndarray:
        """Per key, vectorized: False where no index file has anything in its slot (the key
        is surely not indexed), True where a lookup must tell."""
        out = np.zeros(len(keys), dtype=bool)
        if keys and self.files:
            hashes = java_hashes([f"{topic}#{k}" for k in keys])
            for f in self.files:
                out |= f.occupied(hashes)
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
