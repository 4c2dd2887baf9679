"""The commit log's flushed offset, published in a small file for whoever looks after a
crash: `<commit log dir>/flushed`, 8 bytes, big-endian.

It is written through a shared mapping, with no fsync: a kill -9 leaves the page cache (and
so the file's last value) intact, which is all a fault harness needs to know how far the
log was fsynced when the process died (it then cuts the log back no further than that, as
a power loss would). After a real power loss the file may be stale; nothing in the store
reads it. Each value is published after its fsync returns and before any writer is told,
so every acknowledged SYNC_FLUSH write ends at or below it.
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

FLUSHED_FILE = "flushed"
_OFFSET = struct.Struct(">q")


class FlushedMark:
    def __init__(self, directory: Path):
        fd = os.open(Path(directory) / FLUSHED_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != _OFFSET.size:
                os.ftruncate(fd, _OFFSET.size)
            self._mm = mmap.mmap(fd, _OFFSET.size)
        finally:
            os.close(fd)  # the mapping keeps the file open

    def publish(self, offset: int) -> None:
        _OFFSET.pack_into(self._mm, 0, offset)

    def close(self) -> None:
        self._mm.close()

