"""Fixed-size memory-mapped segment files, and the ordered queue of them.

A segment is named by the 20-digit offset of its first byte and preallocated in full with
posix_fallocate, so that a full disk shows up as an error when a segment is created rather
than as SIGBUS on a later write through the mapping.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import threading
from pathlib import Path

import numpy as np

from ..runtime.files import fsync_dir

log = logging.getLogger(__name__)

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_ZERO_RANGE = 0x10
_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_fallocate = getattr(_libc, "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class StoreError(Exception):
    """A store operation that could not be done; the store itself is still consistent."""


class DiskFullError(StoreError):
    """No space left for a new segment (or the disk is above diskMaxUsedSpaceRatio)."""


def segment_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    """One segment: `size` bytes mapped read-write, starting at logical offset `start`."""

    def __init__(self, path: Path, start: int, size: int, *, create: bool,
                 may_extend: bool = False):
        self.path = path
        self.start = start
        self.size = size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o644)
        try:
            if create:
                try:
                    os.posix_fallocate(self.fd, 0, size)
                except OSError as e:
                    if e.errno in DISK_FULL_ERRNOS:
                        raise DiskFullError(f"no space for segment {path} ({size} bytes)") from e
                    raise
            actual = os.fstat(self.fd).st_size
            if actual < size and may_extend:
                # a last segment cut short (by hand, or a torn preallocation): pad it with
                # zeros; recovery then finds where its valid messages end
                log.warning("segment %s is %d bytes, expected %d: extending it", path,
                            actual, size)
                os.posix_fallocate(self.fd, 0, size)
                actual = size
            if actual != size:
                raise StoreError(f"segment {path} is {actual} bytes, expected {size}: the "
                                 f"configured file size does not match the data directory")
            self.mm = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self.view = memoryview(self.mm)
        # for madvise from the prefault thread (store/prefault.py), which checks `closed`
        # under mapping_lock so it never touches an address after the unmap
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.mapping_lock = threading.Lock()
        self.closed = False

    @property
    def end(self) -> int:
        return self.start + self.size

    def sync(self) -> None:
        """Make every write through the mapping durable (fdatasync covers mmap'd pages)."""
        os.fdatasync(self.fd)

    def zero_from(self, pos: int) -> int:
        """Make every byte from `pos` to the end zero; returns the length of the non-zero
        run that started at `pos` (what was cut).

        The page-aligned bulk is handed to fallocate(ZERO_RANGE), which turns it back into
        unwritten extents without reading it; where that is not supported, the non-zero
        parts are found through SEEK_DATA and cleared by hand.
        """
        cut = self.nonzero_run(pos)
        aligned = min(self.size, -(-pos // _PAGE) * _PAGE)
        self.view[pos:aligned] = bytes(aligned - pos)
        if aligned < self.size:
            if _fallocate is None or _fallocate(
                    self.fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, aligned,
                    self.size - aligned) != 0:
                self._zero_by_hand(aligned)
        return cut

    def nonzero_run(self, pos: int, block: int = 64 * 1024) -> int:
        """Bytes from `pos` to the last non-zero byte before the first all-zero block."""
        off = last = pos
        while off < self.size:
            stop = min(off + block, self.size)
            nz = np.flatnonzero(np.frombuffer(self.mm, np.uint8, stop - off, off))
            if not len(nz):
                break
            last = off + int(nz[-1]) + 1
            off = stop
        return last - pos

    def _zero_by_hand(self, pos: int) -> int:
        cleared, off, chunk = 0, pos, 1 << 20
        while off < self.size:
            try:
                data = os.lseek(self.fd, off, os.SEEK_DATA)
            except OSError:
                break  # nothing but holes / unwritten extents after off
            hole = min(os.lseek(self.fd, data, os.SEEK_HOLE), self.size)
            start = max(data, off)
            while start < hole:
                stop = min(start + chunk, hole)
                if np.frombuffer(self.mm, np.uint8, stop - start, start).any():
                    self.view[start:stop] = bytes(stop - start)
                    cleared += stop - start
                start = stop
            off = hole
        return cleared

    def close(self) -> None:
        # wait for a prefault call in progress, but not for ever: the kernel keeps a
        # madvise racing an unmap safe (it fails on the unmapped range); only a long wait
        # here would be harm (a broker that does not stop)
        took = self.mapping_lock.acquire(timeout=1)
        self.closed = True
        if took:
            self.mapping_lock.release()
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            pass  # a reader still holds a slice; the mapping goes when it is dropped
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _holds_data(path: Path) -> bool:
    """Whether a segment's first entry is written (a commit-log message or a 20-byte
    consume-queue entry begins at byte 0 and is never all zeros)."""
    with open(path, "rb") as f:
        return any(f.read(20))


class MappedFileQueue:
    """Contiguous segments of one log (commit log or a consume queue) in one directory."""

    def __init__(self, directory: Path, file_size: int):
        self.dir = Path(directory)
        self.file_size = file_size
        self.dir.mkdir(parents=True, exist_ok=True)
        self.files: list[MappedFile] = []
        names = sorted(p for p in self.dir.iterdir() if p.name.isdigit() and len(p.name) == 20)
        for i, p in enumerate(names):
            start = int(p.name)
            if self.files and start != self.files[-1].end:
                raise StoreError(f"segment {p} does not follow {self.files[-1].path}: "
                                 f"a segment is missing from {self.dir}")
            # a short segment is the torn tail if nothing was written after it (a crash
            # can come just after the next segment was created): pad it, recovery cuts it
            tail = i == len(names) - 1 or (p.stat().st_size < file_size and
                                           not any(map(_holds_data, names[i + 1:])))
            self.files.append(MappedFile(p, start, file_size, create=False,
                                         may_extend=tail))

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding `offset`, or None."""
        if not self.files or offset < self.files[0].start:
            return None
        i = (offset - self.files[0].start) // self.file_size
        return self.files[i] if i < len(self.files) else None

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def create(self, start: int) -> MappedFile:
        """Append a new segment starting at `start` (a multiple of the file size)."""
        if start % self.file_size:
            raise StoreError(f"segment start {start} is not a multiple of {self.file_size}")
        if self.files and start != self.files[-1].end:
            raise StoreError(f"new segment at {start} does not follow {self.files[-1].end}")
        f = MappedFile(self.dir / segment_name(start), start, self.file_size, create=True)
        # the new name durable at once: an fdatasync of the segment's data later does not
        # promise its directory entry, and a power loss must not leave a gap in the log
        fsync_dir(self.dir)
        self.files.append(f)
        return f

    def ensure(self, offset: int) -> MappedFile:
        """The segment holding `offset`, creating segments up to it when it lies at the end."""
        if self.files:
            f = self.files[-1]
            if f.start <= offset < f.start + f.size:  # the usual case: the last segment
                return f
        f = self.find(offset)
        while f is None:
            if self.files and offset < self.files[0].start:
                raise StoreError(f"offset {offset} is below the first segment")
            start = self.files[-1].end if self.files else offset - offset % self.file_size
            self.create(start)
            f = self.find(offset)
        return f

    def drop_after(self, offset: int) -> int:
        """Delete every segment that starts above `offset`; returns how many."""
        n = 0
        while self.files and self.files[-1].start > offset:
            self.files.pop().destroy()
            n += 1
        if n:
            fsync_dir(self.dir)
        return n

    def drop_front(self, count: int) -> None:
        for _ in range(min(count, max(len(self.files) - 1, 0))):
            self.files.pop(0).destroy()
        fsync_dir(self.dir)

    def sync_range(self, lo: int, hi: int) -> None:
        """fdatasync every segment overlapping [lo, hi) (the last one or two: walked from
        the end, as a group commit does this for every round)."""
        for f in reversed(self.files):
            if f.end <= lo:
                break
            if f.start < hi:
                f.sync()

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
