"""The store faults of a schedule, applied to one broker's files: lost unsynced writes and
corruption of flushed bytes (the broker is killed, its commit log damaged, and it is
restarted when the window ends, as after a power loss or a bad disk), and a full disk (the
small filesystem under its store filled while it runs, emptied when the window ends).

A full disk needs a filesystem of its own under each broker's store, or filling it would
fill the machine: `small_disks` mounts a tmpfs there before the cluster starts."""
from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from .disk import cut_unsynced, damage_flushed, fill, read_flushed, unfill, commitlog_dir

if TYPE_CHECKING:
    from .faults import Applied, Injector

SMALL_DISK = "512m"  # room for a few 64 MiB commit log segments, queues and indexes


def store_dir(inj: "Injector", node: str) -> Path:
    return inj.d / node / "store"


def lost_writes(inj: "Injector", a: "Applied") -> None:
    """kill -9, then lose a random part of what was written after the last fsync."""
    inj.kill(a)
    node = a.nodes[0]
    flushed = read_flushed(commitlog_dir(store_dir(inj, node)))
    if flushed is None:
        a.evidence["cut"] = None  # nothing published yet: nothing to lose
        return
    cut = cut_unsynced(store_dir(inj, node), flushed, random.Random(a.window.params["seed"]))
    a.evidence["cut"] = asdict(cut)


def corrupt(inj: "Injector", a: "Applied") -> None:
    """kill -9, then zero or flip bytes of what the node had fsynced."""
    inj.kill(a)
    p, node = a.window.params, a.nodes[0]
    flushed = read_flushed(commitlog_dir(store_dir(inj, node))) or 0
    hurt = damage_flushed(store_dir(inj, node), flushed, p["bytes"], p["how"],
                          random.Random(p["seed"]))
    a.evidence["damage"] = asdict(hurt) if hurt else None


def disk_full(inj: "Injector", a: "Applied") -> None:
    """Fill the node's small disk while it runs; give the space back at the end."""
    where = store_dir(inj, a.nodes[0])
    if not os.path.ismount(where):
        raise RuntimeError(f"{where} is not a small disk of its own: filling it would fill "
                           "the machine (the runner mounts one when disk-full is asked for)")
    fill(where)
    a.evidence["free_bytes"] = _free(where)

    def give_back() -> dict:
        unfill(where)
        return {"free_bytes_after": _free(where)}
    a.undo = give_back


APPLY = {"lost-writes": lost_writes, "corrupt": corrupt, "disk-full": disk_full}


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextmanager
def small_disks(d: Path, nodes: list[str]) -> Iterator[None]:
    """A tmpfs of SMALL_DISK under each node's store directory for the run, unmounted (lazily:
    a process still holding a file is not an error) when it ends."""
    mounted = []
    try:
        for n in nodes:
            where = d / n / "store"
            where.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs",
                            str(where)], check=True, capture_output=True, text=True)
            mounted.append(where)
        yield
    finally:
        for where in mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
