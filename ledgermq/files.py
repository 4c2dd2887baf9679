"""Small files written atomically: a reader, or a crash, sees the old or the new bytes,
never a mix. Every state file of every server goes through replace_file."""
from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
