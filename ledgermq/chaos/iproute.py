"""Running iproute2 (`ip`, `tc`) for the test hosts, with errors that say which command
failed and what the tool printed."""
from __future__ import annotations

import os
import re
import signal
import subprocess


class NetError(RuntimeError):
    """A command setting up or tearing down test hosts failed."""


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """`ip [-n NETNS] ARGS`; its stdout. check=False: a failure returns "" (teardown)."""
    return _run(["ip", *(["-n", netns] if netns else []), *args], check)


def tc(*args: str, netns: str | None = None, check: bool = True) -> str:
    return _run(["tc", *(["-n", netns] if netns else []), *args], check)


def batch(lines: list[str], netns: str | None = None) -> None:
    """Several `ip` commands in one process (`ip -batch -`), stopping at the first failure."""
    _run(["ip", *(["-n", netns] if netns else []), "-batch", "-"], True, "\n".join(lines) + "\n")


def _run(argv: list[str], check: bool, stdin: str | None = None) -> str:
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        if check:
            raise NetError(f"`{' '.join(argv)}` could not run: {e}") from e
        return ""
    if p.returncode and check:
        raise NetError(f"`{' '.join(argv)}` failed ({p.returncode}): "
                       f"{(p.stderr or p.stdout).strip()}")
    return p.stdout if p.returncode == 0 else ""


def namespaces() -> list[str]:
    """Names of every named network namespace (`ip netns list`)."""
    return [line.split()[0] for line in ip("netns", "list", check=False).splitlines()
            if line.strip()]


def links() -> list[str]:
    """Names of every link in the root namespace (`veth@peer` listed as `veth`)."""
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)[@:]",
                                            ip("-o", "link", "show", check=False), re.MULTILINE)]


def used_networks() -> list[str]:
    """Every IPv4 network with an address on a root-namespace link, e.g. "10.77.0.1/24"."""
    return re.findall(r"\binet (\S+)", ip("-o", "-4", "addr", "show", check=False))


def kill_all_in(netns: str) -> list[int]:
    """SIGKILL every process running in `netns` (by the pids `ip netns pids` reports); the
    pids signalled. For leftovers only: what a net started it stops through its Popen."""
    pids = [int(p) for p in ip("netns", "pids", netns, check=False).split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids
