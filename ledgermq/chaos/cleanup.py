"""Nothing a test net makes outlives its run: the names that say who made what, the nets this
process has open, and what removes them whichever way the run ends (the net's own close,
SIGTERM or SIGHUP, interpreter exit; a SIGKILLed run's leftovers are `sweep`'s).

Names: everything a net creates is called `lmq<pid>-<n>-<x>` (pid and counter in hex, short
enough for a link name): `<x>` is a host's index for its namespace and veth, `br` for the
bridge. Two runs never collide, and a dead pid marks a crashed run's leftovers.
"""
from __future__ import annotations

import atexit
import itertools
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Protocol

from ..localcluster.cluster import pid_alive
from .iproute import ip, kill_all_in, links, namespaces

PREFIX = "lmq"
_TAG = re.compile(rf"^({PREFIX}([0-9a-f]+)-[0-9a-f]+)-")  # (tag, creator pid)
_counter = itertools.count()


class Closable(Protocol):
    def close(self) -> None: ...


live: dict[str, Closable | None] = {}  # tags this process is using (None: not a net)


def new_tag() -> str:
    """A fresh `lmq<pid>-<n>` (n wraps at 256: a process never has that many nets open)."""
    return f"{PREFIX}{os.getpid():x}-{next(_counter) % 256:x}"


def kill(p: subprocess.Popen, own_group: bool) -> None:
    """SIGKILL a process we started, with its process group when it has its own, and reap it.
    Only while it is unreaped: then its pid (and group id) cannot have been reused."""
    if p.returncode is None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL) if own_group else p.kill()
    with suppress(subprocess.TimeoutExpired):
        p.wait(10)


def sweep() -> list[str]:
    """Remove the namespaces and links of runs that died without cleaning up: names of our
    scheme whose creator pid is dead (or is this process, in no net it has open). Their
    processes are killed by pid. Returns the names removed."""
    def stale(name: str) -> bool:
        m = _TAG.match(name)
        if not m:
            return False
        pid = int(m.group(2), 16)
        return m.group(1) not in live if pid == os.getpid() else not pid_alive(pid)

    old_ns = [n for n in namespaces() if stale(n)]
    old_links = [n for n in links() if stale(n)]
    for n in old_ns:
        kill_all_in(n)
    for n in sorted(old_links, key=lambda n: n.endswith("-br")):  # bridges last
        ip("link", "del", n, check=False)
    for n in old_ns:
        ip("netns", "del", n, check=False)
    return sorted(set(old_ns + old_links))  # a host's namespace and veth share a name


# -- signals: a terminated test run still cleans up ------------------------------------
_HANDLED = (signal.SIGTERM, signal.SIGHUP)
_previous: dict[int, object] = {}


def _close_all() -> None:
    for net in [n for n in live.values() if n is not None]:
        with suppress(Exception):
            net.close()


def _on_terminate(signum, frame) -> None:
    """Close every open net, then end the process as the signal would, but by SystemExit:
    the `with` blocks still open unwind (a run's small disks are unmounted, its clients
    stopped) instead of being left behind."""
    prev = _previous.get(signum, signal.SIG_DFL)
    _close_all()
    signal.signal(signum, prev)
    _previous.pop(signum, None)
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        raise SystemExit(128 + signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def guard_signals() -> None:
    """While a net is open, SIGTERM and SIGHUP close it before they end the process.
    (SIGINT needs nothing: its KeyboardInterrupt unwinds the `with` blocks.)"""
    if _main_thread():
        for s in _HANDLED:
            if s not in _previous:
                _previous[s] = signal.signal(s, _on_terminate)


def unguard_signals() -> None:
    """Give the handlers back once no net is open."""
    if not _main_thread() or any(n is not None for n in live.values()):
        return
    for s, prev in list(_previous.items()):
        if signal.getsignal(s) is _on_terminate:
            signal.signal(s, prev)
        del _previous[s]


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while tearing down, then deliver them: an interrupt
    must not leave half a net behind."""
    if not _main_thread():
        yield
        return
    got: list[int] = []
    saved = {s: signal.signal(s, lambda n, f: got.append(n))
             for s in (signal.SIGINT, *_HANDLED)}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        for s in dict.fromkeys(got):
            signal.raise_signal(s)


atexit.register(_close_all)
