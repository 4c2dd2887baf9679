"""Disk faults on a node's files, done from outside while the node is down or running:
lost unsynced writes (a power loss after a kill) and a full disk. Works on files only (no
store import): a commit log is a directory of equal-size segments named by the 20-digit
offset of their first byte; the store publishes how far it fsynced in `flushed`.
"""
from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path

# the store's abort mark (store/marks/abort_mark.py): while a store is open it holds the boot id
# of the machine's boot that opened it, which tells a crash from a power loss
ABORT_MARK = "abort"

FLUSHED_FILE = "flushed"  # 8 bytes, big-endian (store/marks/flushed_mark.py)
_CHUNK = 1 << 20


def commitlog_dir(store_dir: Path) -> Path:
    """A store root's default commit log directory (storePathCommitLog unset)."""
    return Path(store_dir) / "commitlog"


def read_flushed(log_dir: Path) -> int | None:
    """The flushed offset the store last published (readable after kill -9), or None."""
    try:
        raw = (Path(log_dir) / FLUSHED_FILE).read_bytes()
    except FileNotFoundError:
        return None
    return struct.unpack(">q", raw)[0] if len(raw) == 8 else None


def _segments(log_dir: Path) -> list[Path]:
    return sorted(p for p in Path(log_dir).iterdir() if p.name.isdigit() and len(p.name) == 20)


def _data_end(seg: Path) -> int:
    """Position just past the last non-zero byte of a segment (0 if it is all zeros)."""
    size = seg.stat().st_size
    with open(seg, "rb") as f:
        end = size
        while end > 0:
            start = max(0, end - _CHUNK)
            f.seek(start)
            chunk = f.read(end - start).rstrip(b"\0")
            if chunk:
                return start + len(chunk)
            end = start
    return 0


def written_end(log_dir: Path) -> int:
    """The logical offset just past the last non-zero byte of the commit log."""
    for seg in reversed(_segments(log_dir)):
        end = _data_end(seg)
        if end:
            return int(seg.name) + end
    return 0


@dataclass
class Cut:
    """What cut_unsynced did: the log now holds nothing at or past `offset`."""

    offset: int
    flushed: int
    written_end: int
    how: str  # "zeroed" (sizes kept) or "shortened" (the cut segment's file made shorter)
    emptied: list[str]  # segments past the cut, zeroed or made empty


def cut_unsynced(store_dir: Path, flushed_offset: int, rng: random.Random, *,
                 log_dir: Path | None = None) -> Cut:
    """Lose a random part of what the commit log wrote after its last fsync, as a power
    loss would: everything from a random point in [flushed_offset, written end] on is
    gone. The segment holding that point is either zeroed from it (its size kept) or cut
    short there; later segments are zeroed or left empty (size 0), never removed: the
    store fsyncs the directory when it creates a segment. Consume queues and index are
    left as they are (their entries may point past the new end: recovery must cope).
    Run it on a node that is not running."""
    log_dir = Path(log_dir) if log_dir is not None else commitlog_dir(store_dir)
    end = written_end(log_dir)
    if flushed_offset > end:
        raise ValueError(f"flushed offset {flushed_offset} is past the written end {end} "
                         f"of {log_dir}")
    at = rng.randint(flushed_offset, end)
    how = rng.choice(["zeroed", "shortened"])
    emptied = []
    for seg in _segments(log_dir):
        start, size = int(seg.name), seg.stat().st_size
        if start + size <= at:
            continue
        if start < at or (start == at and how == "zeroed" and not rng.getrandbits(1)):
            _cut_segment(seg, at - start, how)
        else:  # its size was never fsynced (the store fsyncs its directory entry)
            _cut_segment(seg, 0, rng.choice(["zeroed", "shortened"]))
            emptied.append(seg.name)
    mark_power_loss(store_dir)
    return Cut(at, flushed_offset, end, how, emptied)


def mark_power_loss(store_dir: Path) -> None:
    """A power loss restarts the machine: the abort mark of a store it stopped names
    another boot (a clean shutdown left none)."""
    mark = Path(store_dir) / ABORT_MARK
    if mark.exists():
        mark.write_text("a power loss restarted the machine")


def _cut_segment(seg: Path, pos: int, how: str) -> None:
    with open(seg, "r+b") as f:
        if how == "shortened":
            f.truncate(pos)
            return
        size = os.fstat(f.fileno()).st_size
        f.seek(pos)
        while pos < size:
            n = min(_CHUNK, size - pos)
            f.write(bytes(n))
            pos += n


def fill(path: Path, leave: int = 0) -> Path:
    """Take the free space of the filesystem holding `path` (a directory), leaving about
    `leave` bytes: a filler file `path/.disk-filler` written until ENOSPC. Returns it."""
    filler = Path(path) / ".disk-filler"
    block = bytes(_CHUNK)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            st = os.statvfs(path)
            room = st.f_bavail * st.f_frsize - leave
            if room <= 0:
                break
            try:
                os.write(fd, block[:min(_CHUNK, room)])
            except OSError:  # ENOSPC: full
                break
    finally:
        os.close(fd)
    return filler


def unfill(path: Path) -> None:
    """Give back the space fill() took."""
    (Path(path) / ".disk-filler").unlink(missing_ok=True)


@dataclass
class Damage:
    """What damage_flushed did: `length` bytes at log offset `offset` zeroed or flipped."""

    offset: int
    length: int
    how: str  # "zero" or "flip"
    flushed: int


def damage_flushed(store_dir: Path, flushed_offset: int, length: int, how: str,
                   rng: random.Random, *, within: int = 16 << 20,
                   log_dir: Path | None = None) -> Damage | None:
    """Zero or flip `length` bytes of what the commit log fsynced, at a random place in its
    last `within` flushed bytes (a bad sector, a firmware bug: the data was durable and is
    now wrong). Flipping XORs every byte with a random non-zero value, so each one really
    changes. At most half of the flushed bytes in reach (damage, not a lost disk); None when
    there are none. Run it on a node that is not running."""
    log_dir = Path(log_dir) if log_dir is not None else commitlog_dir(store_dir)
    segs = _segments(log_dir)
    low = int(segs[0].name) if segs else 0
    first = max(low, flushed_offset - within)
    length = min(length, (flushed_offset - first) // 2)
    if length <= 0:
        return None
    at = rng.randint(first, flushed_offset - length)
    pos, left = at, length
    for seg in segs:  # the range may cross into the next segment
        start, size = int(seg.name), seg.stat().st_size
        if left == 0 or start + size <= pos:
            continue
        n = min(left, start + size - pos)
        with open(seg, "r+b") as f:
            f.seek(pos - start)
            old = f.read(n)
            new = bytes(n) if how == "zero" else \
                bytes(b ^ rng.randrange(1, 256) for b in old)
            f.seek(pos - start)
            f.write(new)
            os.fsync(f.fileno())
        pos, left = pos + n, left - n
    return Damage(at, length, how, flushed_offset)
