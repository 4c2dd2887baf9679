"""Small files written atomically (a reader, or a crash, sees the old or the new bytes,
never a mix: every state file of every server goes through replace_file), and the lock a
server holds on its data directory."""
from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> Path:
    """A file only its owner may read (a secret, a private key), 0600 from its creation:
    any older file of that name goes first, so no mode of its is kept, and nothing is
    ever widened and narrowed afterwards."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def replace_file(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Give a small file new contents atomically. `durable`: on disk (file and directory
    fsynced) before returning."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


class DirectoryInUse(Exception):
    """Another process holds the directory's lock: two writers would corrupt it."""


class DirectoryLock:
    """An exclusive lock on a data directory (its `lock` file, as RocketMQ's store keeps
    one), held while a server uses the directory. The kernel drops it when the process
    dies, so a crash never leaves the directory locked; the file holds the holder's pid
    for the error message."""

    def __init__(self, directory: Path, what: str = "store"):
        self.directory = Path(directory)
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DirectoryInUse(f"{self.what} {self.directory} is in use by pid {holder}") \
                from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


def write_json_atomically(path: Path, doc) -> None:
    """A JSON state file, through replace_file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(doc, indent=1, sort_keys=True).encode())


def read_json(path: Path, default):
    """A JSON state file, or `default` when there is none; a damaged one is moved aside
    (kept for a person to read) and the server starts from `default`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except ValueError:
        bak = path.with_name(path.name + ".corrupt")
        os.replace(path, bak)
        log.error("%s is not valid JSON; moved it to %s and started empty", path, bak)
        return default
