"""Fixed-size memory-mapped segment files, and the ordered queue of them.

A segment is named by the 20-digit offset of its first byte and preallocated in full with
posix_fallocate, so that a full disk shows up as an error when a segment is created rather
than as SIGBUS on a later write through the mapping.
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
from pathlib import Path

log = logging.getLogger(__name__)


class StoreError(Exception):
    """A store operation that could not be done; the store itself is still consistent."""


class DiskFullError(StoreError):
    """No space left for a new segment (or the disk is above diskMaxUsedSpaceRatio)."""


def segment_name(offset: int) -> str:
    return f"{offset:020d}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
                    if e.errno == errno.ENOSPC:
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

    @property
    def end(self) -> int:
        return self.start + self.size

    def sync(self) -> None:
        """Make every write through the mapping durable (fdatasync covers mmap'd pages)."""
        os.fdatasync(self.fd)

    def close(self) -> None:
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            pass  # a reader still holds a slice; the mapping goes when it is dropped
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


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
            self.files.append(MappedFile(p, start, file_size, create=False,
                                         may_extend=i == len(names) - 1))

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
        self.files.append(f)
        return f

    def ensure(self, offset: int) -> MappedFile:
        """The segment holding `offset`, creating segments up to it when it lies at the end."""
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
        """fdatasync every segment overlapping [lo, hi)."""
        for f in self.files:
            if f.end > lo and f.start < hi:
                f.sync()

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
