"""The commit log: stored messages back to back in fixed-size segments, by physical offset.

Callers hold the store's lock around every mutating call; reads of written ranges are safe
without it because bytes below `max_offset` never change (except by an explicit truncate).
"""
from __future__ import annotations

import logging
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..runtime.files import fsync_dir, replace_file
from ..wire.batch import POSITIONS, TIMESTAMP, EncodedBatch, fill_positions
from ..wire.message import (
    BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH, OFF_QUEUEOFFSET, OFF_STORETIMESTAMP,
    MessageFormatError,
)
from ..wire.scan import BLANK, CORRUPT, LIMIT, ScannedMessage, walk
from ..wire.scan_batch import ScannedBatch, walk_batch
from .mapped_file import MappedFile, MappedFileQueue, StoreError
from .marks.flushed_mark import FlushedMark
from .prefault import Prefaulter
from .single import put_single

log = logging.getLogger(__name__)

TRUNCATE_MARKER = "truncate.pending"


@dataclass
class RecoveryReport:
    """What a recovery found: where the log ends and what it cut off."""

    scanned_from: int = 0
    end_offset: int = 0
    messages_scanned: int = 0
    truncated_bytes: int = 0  # bytes of torn/invalid tail cleared
    truncated_reason: str = ""
    damaged_from: int = -1  # where re-verified (flushed) bytes below the checkpoint failed
    dropped_segments: int = 0
    seconds: float = 0.0
    crashed: bool = False
    # after a crash: was it the same boot (only the process died, the page cache kept what
    # was written), another one (unflushed writes may be lost), or unknown (None)
    same_boot: bool | None = None
    messages: list[ScannedMessage] = field(default_factory=list, repr=False)


class CommitLog:
    def __init__(self, directory: Path, file_size: int):
        if file_size < 4096:
            raise StoreError(f"mappedFileSizeCommitLog {file_size} is too small (min 4096)")
        self.dir = Path(directory)
        self.files = MappedFileQueue(self.dir, file_size)
        self.file_size = file_size
        self.max_offset = self.files.min_offset  # end of the last whole message
        self._mark = FlushedMark(self.dir)
        self.flushed_offset = self.max_offset
        # a flush and a cut must not interleave, or a flush could claim bytes written
        # after the cut as durable
        self._flush_lock = threading.Lock()
        self._prefault = Prefaulter()  # pages ahead of the writer, off the event loop

    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def flushed_offset(self) -> int:
        """Every byte below it is fsynced (published for fault harnesses: flushed_mark)."""
        return self._flushed

    @flushed_offset.setter
    def flushed_offset(self, offset: int) -> None:
        self._flushed = offset
        self._mark.publish(offset)

    # ---- writes ---------------------------------------------------------------------
    def append_batch(self, batch: EncodedBatch, first_queue_offset: int,
                     store_timestamp: int) -> np.ndarray | tuple:
        """Append a batch (one reservation per segment touched); returns physical offsets
        (a tuple for a batch of one)."""
        n = len(batch)
        if n == 1:
            return self._append_one(batch, first_queue_offset, store_timestamp)
        phys = np.empty(n, dtype=np.int64)
        ends = batch.starts + batch.sizes
        src = memoryview(batch.buf)
        lo = 0
        while lo < n:
            seg = self.files.ensure(self.max_offset)
            pos = self.max_offset - seg.start
            room = seg.size - pos - END_FILE_MIN_BLANK_LENGTH
            base = int(batch.starts[lo])
            if int(ends[-1]) - base <= room:
                k = n - lo  # the common case: the rest fits in this segment
            else:
                k = int(np.searchsorted(ends[lo:] - base, room, side="right"))
            if k == 0:
                if pos == 0:
                    raise MessageFormatError(
                        f"message of {int(batch.sizes[lo])} bytes does not fit a segment of "
                        f"{seg.size} bytes")
                self._write_blank(seg, pos)
                continue
            hi = lo + k
            fill_positions(batch, lo, hi, self.max_offset, first_queue_offset + lo,
                           store_timestamp)
            nbytes = int(ends[hi - 1] - base)
            seg.view[pos:pos + nbytes] = src[base:base + nbytes]
            phys[lo:hi] = batch.starts[lo:hi] - base + self.max_offset
            self.max_offset += nbytes
            lo = hi
        self._prefault.ahead(seg, pos + nbytes)
        return phys

    def _append_one(self, batch: EncodedBatch, queue_offset: int,
                    store_timestamp: int) -> tuple:
        """append_batch for a batch of one, without the vector bookkeeping."""
        size = len(batch.buf)
        while True:
            seg = self.files.ensure(self.max_offset)
            pos = self.max_offset - seg.start
            if size + END_FILE_MIN_BLANK_LENGTH <= seg.size - pos:
                break
            if pos == 0:
                raise MessageFormatError(
                    f"message of {size} bytes does not fit a segment of {seg.size} bytes")
            self._write_blank(seg, pos)
        at = self.max_offset
        buf = batch.buf
        POSITIONS.pack_into(buf, OFF_QUEUEOFFSET, queue_offset, at)  # fill_positions, inline
        TIMESTAMP.pack_into(buf, OFF_STORETIMESTAMP, store_timestamp)
        seg.view[pos:pos + size] = buf
        self.max_offset = at + size
        self._prefault.ahead(seg, pos + size)
        return (at,)

    def append_single(self, batch: EncodedBatch, queue_offset: int, store_timestamp: int,
                      cq_mm, cq_pos: int) -> int:
        """_append_one and the message's consume-queue entry (at cq_mm[cq_pos:]) in one
        compiled write, when the message fits the last segment as it stands; returns its
        physical offset, or -1 (nothing written) when the general way must make room."""
        files = self.files.files
        if not files:
            return -1
        seg = files[-1]
        at = self.max_offset
        pos = at - seg.start
        size = len(batch.buf)
        if pos < 0 or pos + size + END_FILE_MIN_BLANK_LENGTH > seg.size:
            return -1
        put_single(seg.mm, pos, batch.buf, queue_offset, at, store_timestamp, cq_mm, cq_pos,
                   batch.tag_codes[0])
        self.max_offset = at + size
        self._prefault.ahead(seg, pos + size)
        return at

    def _write_blank(self, seg: MappedFile, pos: int) -> None:
        struct.pack_into(">ii", seg.mm, pos, seg.size - pos, BLANK_MAGIC_CODE)
        self.max_offset = seg.end

    def start_at(self, offset: int) -> None:
        """An empty log begins at `offset` (a segment start): a new slave that copies
        only the master's last segment."""
        if self.files.files or self.max_offset:
            raise StoreError(f"the commit log is not empty (it ends at {self.max_offset})")
        if offset % self.file_size:
            raise StoreError(f"start offset {offset} is not a multiple of {self.file_size}")
        self.files.ensure(offset)
        self.max_offset = self.flushed_offset = offset

    def append_raw(self, offset: int, data, *, partial_tail: bool = False
                   ) -> list[ScannedBatch]:
        """Append already-encoded messages at `offset` (the replica path).

        The range must start at our max offset and hold whole messages as the primary
        wrote them (with `partial_tail`, an unfinished last message is left out: the
        caller keeps it for later); after a blank marker it continues at the next segment
        (the blank's padding may be included or left out). Nothing is written unless all
        of it validates. Returns what was appended, for dispatch.
        """
        if offset != self.max_offset:
            raise StoreError(f"replica append at {offset}, but the log ends at {self.max_offset}")
        data = memoryview(data).cast("B")
        out: list[ScannedBatch] = []
        pieces: list[tuple[int, memoryview, bool]] = []
        cur = offset
        while data:
            room = self.file_size - cur % self.file_size
            chunk = data[:room]
            stop, reason, detail, batch = walk_batch(chunk, 0, len(chunk), cur, room)
            if len(batch):
                out.append(batch)
            blank = reason == BLANK
            if partial_tail and reason == LIMIT and stop < len(chunk):
                pieces.append((cur, chunk[:stop], False))
                break
            if not blank and (reason != LIMIT or stop != len(chunk)):
                raise StoreError(f"replica data at {cur + stop} is not a whole message "
                                 f"({reason}{': ' + detail if detail else ''})")
            pieces.append((cur, chunk[:stop + 8] if blank else chunk, blank))
            data = data[len(chunk):]
            cur = cur - cur % self.file_size + self.file_size if blank else cur + stop
        for at, part, blank in pieces:
            seg = self.files.ensure(at)
            pos = at - seg.start
            seg.view[pos:pos + len(part)] = part
            self.max_offset = seg.end if blank else at + len(part)
            self._prefault.ahead(seg, pos + len(part))
        return out

    # ---- reads ----------------------------------------------------------------------
    def read(self, offset: int, size: int) -> memoryview:
        """Bytes [offset, offset+size) as a zero-copy view (must not cross a segment)."""
        seg = self.files.find(offset)
        if seg is None or offset + size > seg.end or offset + size > self.max_offset:
            raise StoreError(f"range {offset}+{size} is not in the commit log "
                             f"[{self.min_offset}, {self.max_offset})")
        pos = offset - seg.start
        return seg.view[pos:pos + size]

    def size_at(self, offset: int) -> int:
        seg = self.files.find(offset)
        if seg is None or offset >= self.max_offset:
            raise StoreError(f"offset {offset} is not in the commit log")
        return struct.unpack_from(">i", seg.mm, offset - seg.start)[0]

    def scan(self, lo: int, hi: int, *, check_crc: bool = False,
             want_keys: bool = True) -> list[ScannedMessage]:
        """Messages whose start lies in [lo, hi); lo must be a message boundary."""
        out: list[ScannedMessage] = []
        cur = lo
        while cur < hi:
            seg = self.files.find(cur)
            if seg is None:
                break
            stop, reason, detail = walk(seg.view, cur - seg.start, min(hi, seg.end) - seg.start,
                                        seg.start, seg.size, check_crc=check_crc,
                                        want_keys=want_keys, out=out)
            if reason == BLANK or (reason == LIMIT and stop + seg.start == seg.end):
                cur = seg.end
            elif reason == LIMIT:
                break
            else:
                raise StoreError(f"commit log damaged at {seg.start + stop}: {reason} {detail}")
        return out

    # ---- flush ----------------------------------------------------------------------
    def flush(self) -> int:
        """fdatasync everything written so far; returns the new flushed offset."""
        with self._flush_lock:
            target = self.max_offset
            if target > self.flushed_offset:
                self.files.sync_range(self.flushed_offset, target)
                self.flushed_offset = target
            return self.flushed_offset

    # ---- truncation and recovery ---------------------------------------------------
    def truncate(self, offset: int) -> None:
        """Cut the log back to `offset` (a message boundary), crash-safely.

        The target is made durable first, so a crash in the middle of clearing bytes is
        finished by the next recovery instead of leaving a stale tail that looks valid.
        """
        if offset > self.max_offset:
            raise StoreError(f"cannot truncate to {offset}: the log ends at {self.max_offset}")
        marker = self.dir / TRUNCATE_MARKER
        replace_file(marker, struct.pack(">q", offset))
        self.cut(offset)
        marker.unlink()
        fsync_dir(self.dir)

    def cut(self, offset: int) -> tuple[int, int]:
        """Clear every byte from `offset` on and drop later segments; (bytes cleared, dropped)."""
        with self._flush_lock:
            return self._cut_locked(offset)

    def _cut_locked(self, offset: int) -> tuple[int, int]:
        cleared = 0
        seg = self.files.find(offset)
        if seg is None and self.files.files and offset == self.files.files[-1].end:
            seg = None  # cut exactly at the end of the last segment: nothing to clear there
        elif seg is None and self.files.files:
            raise StoreError(f"cannot cut at {offset}: outside the log")
        if seg is not None:
            cleared = seg.zero_from(offset - seg.start)
            seg.sync()
        dropped = self.files.drop_after(offset)
        self.max_offset = offset
        self.flushed_offset = min(self.flushed_offset, offset)
        return cleared, dropped

    def clear(self) -> None:
        """Drop every segment: an empty log, ready for start_at."""
        with self._flush_lock:
            self.files.drop_after(-1)
            self.max_offset = self.flushed_offset = 0

    def verify_below(self, safe_offset: int, window: int) -> tuple[int, str]:
        """Re-read, CRCs included, the messages in the last `window` bytes below
        `safe_offset`: bytes the checkpoint says are durable, which a disk may still have
        zeroed or flipped since. Walks from the start of the segment that reaches into the
        window (a message boundary), headers only until the window starts. Returns
        (safe_offset, "") when all is well, else where the damage starts and why."""
        lo = max(self.min_offset, safe_offset - window)
        seg = self.files.find(lo)
        if seg is None or window <= 0:
            return safe_offset, ""
        cur = seg.start
        while cur < safe_offset and (seg := self.files.find(cur)) is not None:
            hi = min(safe_offset, seg.end) - seg.start
            pos, reason, detail = cur - seg.start, LIMIT, ""
            if cur < lo:  # headers only up to the window (sizes chain the boundaries)
                pos, reason, detail = walk(seg.view, pos, min(lo - seg.start, hi), seg.start,
                                           seg.size, check_crc=False, want_keys=False)
            if reason == LIMIT:
                pos, reason, detail = walk(seg.view, pos, hi, seg.start, seg.size,
                                           check_crc=True, want_keys=False)
            if reason == LIMIT and pos < hi:
                reason, detail = CORRUPT, "a message runs past the checkpoint"
            if reason not in (LIMIT, BLANK):  # zeros (END) or a bad message, below safe
                return seg.start + pos, f"{detail or reason} at offset {seg.start + pos}"
            cur = seg.end  # the segment is whole (or safe_offset lies in it: done)
        return safe_offset, ""

    def _start_before(self, offset: int) -> int:
        """Where the message ending at `offset` starts (`offset` when none does)."""
        seg = self.files.find(offset - 1) if offset > self.min_offset else None
        if seg is None:
            return offset
        found: list = []
        walk(seg.view, 0, offset - seg.start, seg.start, seg.size, check_crc=False,
             want_keys=False, out=found)
        return found[-1].phys if found else offset

    def recover(self, safe_offset: int, report: RecoveryReport,
                verify_bytes: int = 0) -> RecoveryReport:
        """Find the end of the log from `safe_offset` (a durable message boundary).

        First re-verifies the last `verify_bytes` below it (verify_below): damage there
        moves the end down to where it starts. Then validates every message from there,
        truncates the first invalid one and everything after it, and records the scanned
        messages in the report for re-dispatch.
        """
        marker = self.dir / TRUNCATE_MARKER
        if marker.exists():
            target = struct.unpack(">q", marker.read_bytes()[:8])[0]
            log.warning("finishing an interrupted truncation to %d", target)
            self.max_offset = max(self.max_offset, target)
            self.cut(target)
            marker.unlink()
            safe_offset = min(safe_offset, target)
        if not self.files.files:
            self.max_offset = self.flushed_offset = safe_offset
            report.end_offset = safe_offset
            return report
        cap = None  # where damage found below the checkpoint ends the log
        if self.files.files:
            checked, why = self.verify_below(safe_offset, verify_bytes)
            if why:
                # damage is a run of bytes: it may begin in the last message the checks
                # passed, in its header or properties, which no CRC covers
                cut = self._start_before(checked)
                log.error("commit log damaged below its checkpoint (%d): %s; the log now "
                          "ends at %d, before the message in front of it; replication must "
                          "restore the rest", safe_offset, why, cut)
                report.damaged_from, report.truncated_reason = checked, why
                safe_offset = cap = cut
        cur = max(safe_offset, self.min_offset)
        report.scanned_from = cur
        while True:
            seg = self.files.find(cur)
            if seg is None:
                break
            stop, reason, detail = walk(seg.view, cur - seg.start, seg.size, seg.start,
                                        seg.size, out=report.messages)
            if reason == BLANK:
                cur = seg.end
                continue
            cur = seg.start + stop
            if reason == CORRUPT and not report.truncated_reason:
                report.truncated_reason = f"{detail} at offset {cur}"
            break
        if cap is not None and cur > cap:  # (the walk passed the message the cap drops)
            cur = cap
            report.messages = [m for m in report.messages if m.phys < cap]
        self.max_offset = cur
        cleared, dropped = self.cut(cur) if self.files.files else (0, 0)
        report.truncated_bytes = cleared if report.truncated_reason else 0
        report.dropped_segments = dropped
        report.end_offset = cur
        report.messages_scanned = len(report.messages)
        self.flushed_offset = cur
        return report

    def close(self) -> None:
        self._prefault.stop()
        self.files.close()
        self._mark.close()
