"""The store checkpoint: commit-log offsets below which everything is known durable.

    commitlog_offset  every commit-log byte below it was fsynced
    dispatch_offset   every consume-queue and index entry for messages below it was fsynced

Recovery scans the commit log only from min(commitlog_offset, dispatch_offset), so its cost
is the writes since the last checkpoint, not the size of the log. The file is replaced
atomically (write, fsync, rename) and carries a CRC; a missing or damaged checkpoint means
"scan from the start of the log", which is slow but never wrong.
"""
from __future__ import annotations

import logging
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from ...runtime.clock import wall_ms
from ...runtime.files import replace_file

log = logging.getLogger(__name__)

_MAGIC = b"LMQC"
_LAYOUT = struct.Struct(">4sIqqq")  # magic, version, commitlog, dispatch, written-at ms
_CRC = struct.Struct(">I")


@dataclass
class Checkpoint:
    commitlog_offset: int = 0
    dispatch_offset: int = 0
    written_at_ms: int = 0

    @property
    def safe_offset(self) -> int:
        return min(self.commitlog_offset, self.dispatch_offset)


def load_checkpoint(path: Path) -> Checkpoint | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) != _LAYOUT.size + _CRC.size:
        log.warning("checkpoint %s has a wrong size; scanning the whole log", path)
        return None
    body, (crc,) = raw[:_LAYOUT.size], _CRC.unpack(raw[_LAYOUT.size:])
    magic, version, cl, disp, ts = _LAYOUT.unpack(body)
    if magic != _MAGIC or version != 1 or zlib.crc32(body) != crc:
        log.warning("checkpoint %s is damaged; scanning the whole log", path)
        return None
    return Checkpoint(cl, disp, ts)


def save_checkpoint(path: Path, cp: Checkpoint) -> None:
    cp.written_at_ms = wall_ms()
    body = _LAYOUT.pack(_MAGIC, 1, cp.commitlog_offset, cp.dispatch_offset, cp.written_at_ms)
    replace_file(path, body + _CRC.pack(zlib.crc32(body)))
