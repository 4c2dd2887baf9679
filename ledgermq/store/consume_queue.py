"""Consume queues: per (topic, queueId), 20-byte entries mapping a logical queue offset to
(commit-log offset, size, tag hash code). Entry i lives at byte i * 20 of the queue's
segments, so re-dispatching a message rewrites the same bytes: queues can always be rebuilt
from the commit log.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..wire.native import twin_or_fallback
from .mapped_file import MappedFileQueue, StoreError

ENTRY_SIZE = 20
ENTRY = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tag", ">i8")])
assert ENTRY.itemsize == ENTRY_SIZE
ENTRY_STRUCT = struct.Struct(">qiq")  # one entry: phys, size, tag


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int):
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(directory, entries_per_file * ENTRY_SIZE)
        self.entries_per_file = entries_per_file
        self.max_offset = self.files.min_offset // ENTRY_SIZE  # next queue offset to fill
        self.min_offset = self.max_offset  # first queue offset still readable
        self.flushed_offset = self.max_offset  # in entries
        self.dirty = False

    # ---- writes ---------------------------------------------------------------------
    def put(self, first: int, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Write entries for queue offsets first, first+1, ... (overwrites are idempotent)."""
        n = len(phys)
        if n == 1:
            self.put_one(first, int(phys[0]), int(sizes[0]), int(tags[0]))
            return
        if first > self.max_offset == self.min_offset:
            self.min_offset = first  # a replica that began mid-stream: nothing before this
        entries = np.empty(n, dtype=ENTRY)
        entries["phys"] = phys
        entries["size"] = sizes
        entries["tag"] = tags
        raw = memoryview(entries.view(np.uint8))
        at = first * ENTRY_SIZE
        i = 0
        while i < len(raw):
            seg = self.files.ensure(at)
            pos = at - seg.start
            take = min(len(raw) - i, seg.size - pos)
            seg.view[pos:pos + take] = raw[i:i + take]
            i += take
            at += take
        self.max_offset = max(self.max_offset, first + n)
        self.dirty = True

    def put_one(self, offset: int, phys: int, size: int, tag: int) -> None:
        """put() of one entry, without the arrays."""
        if offset > self.max_offset == self.min_offset:
            self.min_offset = offset  # a replica that began mid-stream: nothing before this
        at = offset * ENTRY_SIZE
        seg = self.files.ensure(at)
        ENTRY_STRUCT.pack_into(seg.mm, at - seg.start, phys, size, tag)
        if offset >= self.max_offset:
            self.max_offset = offset + 1
        self.dirty = True

    def next_slot(self, offset: int) -> tuple | None:
        """(mapped segment, position) of entry `offset` when it is the next one and its
        segment exists (a single send's entry, written with its message: put_single);
        None otherwise. `filled(offset)` once written."""
        if offset != self.max_offset or not self.files.files:
            return None
        seg = self.files.files[-1]
        pos = offset * ENTRY_SIZE - seg.start
        return (seg.mm, pos) if 0 <= pos <= seg.size - ENTRY_SIZE else None

    def filled(self, offset: int) -> None:
        self.max_offset = offset + 1
        self.dirty = True

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            lo = self.flushed_offset * ENTRY_SIZE
            target = self.max_offset
            self.files.sync_range(min(lo, target * ENTRY_SIZE), target * ENTRY_SIZE)
            self.flushed_offset = target

    # ---- reads ----------------------------------------------------------------------
    def entries(self, offset: int, count: int) -> np.ndarray:
        """Up to `count` entries from `offset`, within one segment (a zero-copy view)."""
        raw = self.raw_entries(offset, count)
        return np.frombuffer(raw, dtype=ENTRY) if raw else np.empty(0, dtype=ENTRY)

    def raw_entries(self, offset: int, count: int) -> memoryview:
        """The same as bytes: up to `count` 20-byte entries from `offset`, one segment's."""
        if offset < self.min_offset or offset >= self.max_offset or count <= 0:
            return memoryview(b"")
        at = offset * ENTRY_SIZE
        seg = self.files.find(at)
        if seg is None:
            return memoryview(b"")
        count = min(count, self.max_offset - offset, (seg.end - at) // ENTRY_SIZE)
        return seg.view[at - seg.start:at - seg.start + count * ENTRY_SIZE]

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        e = self.entries(offset, 1)
        return (int(e["phys"][0]), int(e["size"][0]), int(e["tag"][0])) if len(e) else None

    # ---- recovery and retention ----------------------------------------------------
    def recover(self, log_min: int, log_end: int) -> int:
        """Drop entries pointing at or past the commit log's end; find min and max offsets.

        Returns how many entries were dropped.
        """
        dropped = 0
        while self.files.files:
            seg = self.files.files[-1]
            ents = np.frombuffer(seg.mm, dtype=ENTRY)
            valid = ents["size"] > 0
            stale = valid & (ents["phys"] + ents["size"] > log_end)
            if stale.any():
                first_bad = int(np.argmax(stale))
                seg.view[first_bad * ENTRY_SIZE:] = bytes(seg.size - first_bad * ENTRY_SIZE)
                dropped += int(np.count_nonzero(valid[first_bad:]))
                seg.sync()
                valid = valid[:first_bad]
            if valid.any():
                last = len(valid) - 1 - int(np.argmax(valid[::-1]))
                self.max_offset = seg.start // ENTRY_SIZE + last + 1
                break
            if len(self.files.files) == 1:
                self.max_offset = seg.start // ENTRY_SIZE
                break
            self.files.drop_after(seg.start - 1)  # an empty trailing segment
        self.flushed_offset = self.max_offset
        self.correct_min_offset(log_min)
        return dropped

    def correct_min_offset(self, log_min: int) -> None:
        """The first entry whose message is still in the commit log."""
        self.min_offset = self.max_offset
        for seg in self.files.files:
            ents = np.frombuffer(seg.mm, dtype=ENTRY)
            ok = (ents["size"] > 0) & (ents["phys"] >= log_min)
            if ok.any():
                self.min_offset = seg.start // ENTRY_SIZE + int(np.argmax(ok))
                return

    def truncate_from_phys(self, phys_end: int) -> None:
        """Forget entries for messages at or past commit-log offset `phys_end`."""
        while self.max_offset > self.min_offset:
            last = self.entry(self.max_offset - 1)
            if last is None or last[0] < phys_end:
                break
            self.max_offset -= 1
        at = self.max_offset * ENTRY_SIZE
        seg = self.files.find(at)
        if seg is not None:
            pos = at - seg.start
            seg.view[pos:] = bytes(seg.size - pos)
            seg.sync()
        self.files.drop_after(at)
        self.flushed_offset = min(self.flushed_offset, self.max_offset)

    def delete_below(self, log_min: int) -> int:
        """Delete whole segments whose entries all point below `log_min`; returns count."""
        n = 0
        for seg in self.files.files[:-1]:
            last = np.frombuffer(seg.mm, dtype=ENTRY)[-1]
            if int(last["size"]) > 0 and int(last["phys"]) < log_min:
                n += 1
            else:
                break
        if n:
            self.files.drop_front(n)
        self.correct_min_offset(log_min)
        return n

    def close(self) -> None:
        self.files.close()

    def destroy(self) -> None:
        """Close and delete every segment of the queue."""
        self.files.drop_after(-1)


def check_queue_id(queue_id: int) -> None:
    if not 0 <= queue_id < 1 << 16:
        raise StoreError(f"queue id {queue_id} out of range")


@twin_or_fallback("walk_entries")
def walk_entries(ents: memoryview | bytes, first: int, log_min: int, seg_size: int,
                 count: int, total: int, max_bytes: int
                 ) -> tuple[list[int], list[int], int, int, int]:
    """A plain pull's walk over raw entries (`ConsumeQueue.raw_entries`, the first at queue
    offset `first`): (runs, kept, n, count, total). An entry below `log_min`, the commit
    log's start, is skipped. The walk stops before an entry that would take `total` past
    `max_bytes`, unless nothing was taken yet (an oversized first message is taken, and
    ends the walk). `runs` holds lo, hi, lo, hi, ... of the stretches of the log taken,
    consecutive messages joined unless a segment of `seg_size` bytes starts between them;
    `kept` the queue offsets taken; `n` how many entries were walked; `count` and `total`
    those given plus the messages and bytes taken. (Its compiled twin leaves a sum past
    64 bits to this one.)"""
    if seg_size <= 0:
        raise ValueError(f"segment size {seg_size} is not positive")
    runs: list[int] = []
    kept: list[int] = []
    n = 0
    for phys, size, _ in ENTRY_STRUCT.iter_unpack(ents[:len(ents) - len(ents) % ENTRY_SIZE]):
        if phys >= log_min:
            if total + size > max_bytes and count:
                break
            if runs and runs[-1] == phys and (phys - 1) // seg_size == phys // seg_size:
                runs[-1] = phys + size
            else:
                runs += (phys, phys + size)
            kept.append(first + n)
            count += 1
            total += size
        n += 1
        if total > max_bytes:
            break
    return runs, kept, n, count, total
