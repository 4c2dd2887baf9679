"""The Raft log of a DLedger-mode broker: entries live in the commit log itself.

An entry is a batch of stored messages: its data is the 8-byte commit-log offset where the
batch starts followed by the batch's bytes, so a follower appends exactly the leader's bytes
at exactly the leader's offsets. A new leader's empty entry has no bytes. In memory we keep
only each entry's term and commit-log range; bytes are read back from the store when a push
needs them. `raft/index` holds 24 bytes per entry (term, start, end), `raft/meta` the term
and vote, `raft/commit` the committed index.

Retention deletes old commit-log segments, and with them the bytes of the first entries:
those entries are forgotten (the log's `begin` moves up), and the first one kept starts
no lower than the commit log does. A follower that needs entries from before `begin` is
reset to the entry at `begin` (the core's TRUNCATE); its store then begins afresh there.
"""
from __future__ import annotations

import errno
import json
import os
import struct
from pathlib import Path

from ..replication.raft import Entry
from ..runtime.files import replace_file
from ..store import FlushDiskType, MessageStore, StoreError

_REC = struct.Struct(">qqq")
_OFF = struct.Struct(">q")


class LogSpan:
    """An entry's data read from this node's commit log, as views on the mapped segments:
    the 8-byte start, then the bytes. A push writes the views to the socket as they are
    (writev), so the leader copies no message bytes to replicate them. The views show
    whatever the log holds there: the driver drops unsent pushes before it cuts the log."""

    __slots__ = ("start", "views", "size")

    def __init__(self, start: int, views: list[memoryview]):
        self.start = start
        self.views = views
        self.size = sum(map(len, views))

    def __len__(self) -> int:
        return 8 + self.size

    def buffers(self) -> list:
        return [_OFF.pack(self.start), *self.views]

    def __bytes__(self) -> bytes:
        return b"".join(self.buffers())

    def __eq__(self, other) -> bool:
        return bytes(self) == bytes(other)


def entry_range(e: Entry, log_end: int) -> tuple[int, int]:
    """(start, end) in the commit log of an entry's bytes; an empty entry sits at log_end."""
    if not e.data:
        return log_end, log_end
    data = e.data
    start = data.start if type(data) is LogSpan else _OFF.unpack_from(data)[0]
    return start, start + len(data) - 8


def payload(data) -> list:
    """An entry's message bytes (its data without the start), as buffers."""
    return data.views if type(data) is LogSpan else [memoryview(data)[8:]]


class StoreRaftLog:
    def __init__(self, store: MessageStore, directory: Path):
        self.store = store
        self._segments = store.commitlog.files
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.base = 0  # index of the first entry held (terms[0])
        self.terms: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self._unwritten: dict[int, Entry] = {}  # appended in memory, bytes not yet stored
        # the entry last read (each peer's push reads the same new one), forgotten at every
        # write, cut and compaction: its views never hold a segment retention deletes
        self._last_read: Entry | None = None
        self._index_path = self.dir / "index"
        raw = self._index_path.read_bytes() if self._index_path.exists() else b""
        have = store.commitlog.max_offset
        records = len(raw) // _REC.size  # a torn last record is ignored
        for k in range(records):
            term, start, end = _REC.unpack_from(raw, k * _REC.size)
            if end > have:  # recovery cut its bytes (a torn or damaged tail): gone too
                break
            self.terms.append(term)
            self.starts.append(start)
            self.ends.append(end)
        self.end = self.base + len(self.terms) - 1  # the last entry's index (kept current:
        # the core reads it many times an entry)
        self.promised = self._load_promise(raw, records)
        # unbuffered: a record the disk refused is never written later by a flush
        self._index = os.open(self._index_path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self._index, len(self.terms) * _REC.size)
        self._compact()

    def _load_promise(self, raw: bytes, records: int) -> tuple[int, int] | None:
        """(term, index) of the last entry this log held before recovery cut entries it
        had recorded (their bytes failed the CRCs, or never reached the disk), or of an
        earlier such cut not yet repaired: the core votes by it (election.py). Written
        durably before the index forgets those entries; forgotten once the log passes it."""
        path = self.dir / "promise"
        promised = tuple(json.loads(path.read_text())) if path.exists() else None
        if records > len(self.terms):
            lost = (_REC.unpack_from(raw, (records - 1) * _REC.size)[0], records - 1)
            promised = max(promised or lost, lost)
            replace_file(path, json.dumps(promised).encode(), durable=True)
        if promised is not None and (self.last_term, self.end) >= promised:
            path.unlink()
            return None
        return promised

    # ---- the core's view (MemoryLog's interface) ----------------------------------
    def __bool__(self) -> bool:
        return bool(self.terms)

    @property
    def begin(self) -> int:
        # (read several times an entry: the common case, nothing deleted, costs one call)
        if self.starts and self.starts[0] < self._segments.min_offset:
            self._compact()
        return self.base

    @property
    def last_term(self) -> int:
        return self.terms[-1] if self.terms else 0

    @property
    def log_end(self) -> int:
        """Commit-log offset just past the last entry."""
        return self.ends[-1] if self.ends else self.store.commitlog.min_offset

    def start_of(self, index: int) -> int:
        """Commit-log offset where entry `index` (held) starts."""
        return self.starts[index - self.base]

    def end_of(self, index: int) -> int:
        """Commit-log offset just past entry `index` (held)."""
        return self.ends[index - self.base]

    def bytes_after(self, index: int) -> int:
        """Commit-log bytes above entry `index` (how far behind a peer at `index` is)."""
        if not self.ends:
            return 0
        k = index - self.base
        return self.ends[-1] - (self.ends[k] if 0 <= k < len(self.ends) else self.starts[0])

    def term_at(self, index: int) -> int | None:
        return self.terms[index - self.base] if self.base <= index <= self.end else None

    def entry(self, index: int) -> Entry | None:
        if not self.base <= index <= self.end:
            return None
        if index in self._unwritten:
            return self._unwritten[index]
        last = self._last_read
        if last is not None and last.index == index:
            return last
        k = index - self.base
        start, end = self.starts[k], self.ends[k]
        e = Entry(index, self.terms[k], self.span(start, end) if end > start else b"")
        self._last_read = e
        return e

    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]:
        return tuple(self.entry(i) for i in range(max(lo, self.begin), min(hi, self.end) + 1))

    def append(self, entries) -> None:
        for e in entries:
            if not self.terms:
                self.base = e.index  # a reset log starts at the leader's first entry
            start, end = entry_range(e, self.log_end)
            self.terms.append(e.term)
            self.starts.append(start)
            self.ends.append(end)
            self._unwritten[e.index] = e
        self.end = self.base + len(self.terms) - 1

    def truncate_after(self, index: int) -> None:
        k = max(index + 1 - self.base, 0)
        del self.terms[k:], self.starts[k:], self.ends[k:]
        self.end = self.base + len(self.terms) - 1
        self._last_read = None
        for i in [i for i in self._unwritten if i > index]:
            del self._unwritten[i]

    def _compact(self) -> None:
        """Forget the first entries if retention deleted their bytes (keeping the last
        entry); the first one kept then starts where the commit log now does."""
        low = self._segments.min_offset
        if not self.starts or self.starts[0] >= low:
            return
        self._last_read = None  # (the first entry kept may start higher now)
        k = 0
        while k < len(self.ends) - 1 and self.ends[k] <= low:
            k += 1
        if k:
            del self.terms[:k], self.starts[:k], self.ends[:k]
            self.base += k  # (the end stays where it was)
        self.starts[0] = max(self.starts[0], min(low, self.ends[0]))

    def reset(self, entry: Entry) -> None:
        self.truncate_after(-1)
        self.append((entry,))

    # ---- bytes --------------------------------------------------------------------
    def span(self, start: int, end: int) -> LogSpan:
        """Commit-log bytes [start, end) as an entry's data: views, across segments."""
        cl = self.store.commitlog
        views, cur = [], start
        while cur < end:
            seg = cl.files.find(cur)
            stop = min(end, seg.end)
            views.append(seg.view[cur - seg.start:stop - seg.start])
            cur = stop
        return LogSpan(start, views)

    def read_span(self, start: int, end: int) -> bytes:
        """Commit-log bytes [start, end), across segment boundaries, copied."""
        return b"".join(self.span(start, end).views)

    # ---- durability (the driver calls these for the core's persist actions) -------
    def write_entries(self, entries) -> None:
        """Store the bytes of entries (a follower's; the leader's are already there) and
        their index records. Entries whose bytes follow on from each other are written as
        one range: a push carries many small entries, and each store append has a fixed
        cost (scanning, dispatch bookkeeping)."""
        run: list = []  # bytes of consecutive entries not yet written
        run_start = run_end = -1
        records = []
        first_index = entries[0].index if entries else 0
        self._last_read = None
        for e in entries:
            self._unwritten.pop(e.index, None)
            start, end = entry_range(e, self.start_of(e.index))
            if end > start:
                if not run or start != run_end:
                    self._write_range(run_start, run_end, run)
                    run, run_start = [], start
                run += payload(e.data)
                run_end = end
            if e.index != first_index + len(records):  # not consecutive: write what we have
                self._write_records(first_index, records)
                first_index, records = e.index, []
            records.append(_REC.pack(e.term, start, end))
        self._write_range(run_start, run_end, run)
        self._write_records(first_index, records)

    def _write_range(self, start: int, end: int, parts: list) -> None:
        if not parts:
            return
        have = self.store.commitlog.max_offset
        if have >= end:
            return  # already there (the leader appended it before proposing)
        if have > start:  # a torn copy of these very entries: write them again
            self.store.truncate(start)
        elif have < start:
            raise StoreError(f"entries start at {start} but the commit log ends at {have}")
        self.store.append_raw(start, parts[0] if len(parts) == 1 else b"".join(parts))

    def _write_records(self, first_index: int, records: list[bytes]) -> None:
        if records:
            data = b"".join(records)
            if os.pwrite(self._index, data, first_index * _REC.size) != len(data):
                raise OSError(errno.ENOSPC, f"short write to {self._index_path}")

    def write_reset(self, entry: Entry) -> None:
        """Durably replace the whole log with `entry` (the core's ResetLog). When its bytes
        start past everything the store holds (the leader's first entry after retention
        deleted what we would need before it), the store begins afresh there."""
        self.cut_after(-1)
        start, end = entry_range(entry, self.log_end)
        if end > start and start > self.store.commitlog.max_offset:
            self.store.restart_at(start)
        self.write_entries((entry,))

    def cut_after(self, index: int) -> None:
        """Durably forget entries above `index`, and their bytes."""
        keep_end = self.end_of(index) if index >= self.base else self.store.commitlog.min_offset
        os.ftruncate(self._index, (index + 1) * _REC.size)
        os.fsync(self._index)
        if self.store.commitlog.max_offset > keep_end:
            self.store.truncate(keep_end)

    def sync(self) -> None:
        """Make appended entries durable before they are acknowledged. Under SYNC_FLUSH
        that is an fsync; under ASYNC_FLUSH (as RocketMQ's DLedger store) the bytes are in
        the page cache, which survives a process crash, and the flush thread writes them
        out within flushIntervalCommitLog."""
        if self.store.config.flushDiskType is FlushDiskType.SYNC_FLUSH:
            self.store.commitlog.flush()
            os.fsync(self._index)

    def close(self) -> None:
        if self._index >= 0:
            os.close(self._index)
            self._index = -1
