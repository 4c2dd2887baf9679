"""A slow, lossy link in userspace: what `tc netem` does to the frames an interface sends
(delay, jitter, loss, reordering), for kernels built without sch_netem.

How frames get here and back out (set up by `TestNet.slow`): a tc `clsact` egress filter on
the test host's interface redirects every frame it would send to a tap device this process
owns (`mirred`); the process holds each frame until its release time, then sends it out of
the interface through a packet socket with PACKET_QDISC_BYPASS, so it skips the filter
instead of being redirected again. Only what the host sends is shaped, like netem on the
host's veth; the round trip from anyone to the host grows by the delay.

    python -m ledgermq.chaos.shaper eth0 --tap shape0 --delay-ms 50 --jitter-ms 10 \
        --loss-pct 1 --reorder-pct 5 --seed 7

It prints `ready` once the tap is up. On SIGTERM it sends what it holds, then exits.
"""
from __future__ import annotations

import argparse
import fcntl
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI, IFF_UP = 0x0002, 0x1000, 0x1
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
SOL_PACKET, PACKET_QDISC_BYPASS = 263, 20


@dataclass(frozen=True)
class Shape:
    """netem's knobs. Each frame is lost with `loss_pct`; of the rest, `reorder_pct` go out at
    once (overtaking the delayed ones, as netem's `reorder` does) and the others after
    `delay_ms` +- `jitter_ms` (uniform), so a large jitter reorders too."""
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    reorder_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("delay_ms", "jitter_ms"):
            if not 0 <= getattr(self, name) <= 60_000:
                raise ValueError(f"{name} must be within 0..60000 ms, got {getattr(self, name)}")
        for name in ("loss_pct", "reorder_pct"):
            if not 0 <= getattr(self, name) <= 100:
                raise ValueError(f"{name} must be a percentage 0..100, got {getattr(self, name)}")
        if self.jitter_ms > self.delay_ms:
            raise ValueError(f"jitter_ms ({self.jitter_ms}) must not exceed delay_ms "
                             f"({self.delay_ms})")

    def release_at(self, now: float, rng: random.Random) -> float | None:
        """When a frame that arrived at `now` (seconds) leaves, or None when it is lost."""
        if rng.random() * 100 < self.loss_pct:
            return None
        if rng.random() * 100 < self.reorder_pct:
            return now
        return now + (self.delay_ms + rng.uniform(-self.jitter_ms, self.jitter_ms)) / 1000


def open_tap(name: str) -> int:
    """A tap device named `name`, up, owned by this process (gone when it exits)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = bytearray(struct.pack("16sH", name.encode(), 0).ljust(40, b"\0"))
        fcntl.ioctl(s, SIOCGIFFLAGS, req)
        flags = struct.unpack_from("H", req, 16)[0] | IFF_UP
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", name.encode(), flags).ljust(40, b"\0"))
    return fd


def bypass_socket(dev: str) -> socket.socket:
    """A packet socket that puts whole frames on `dev`'s wire without passing its qdisc
    (so not through the redirecting filter). Protocol 0: it receives nothing."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((dev, 0))
    s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    return s


class _Stop(Exception):
    pass


def _stop(signum, frame) -> None:
    raise _Stop


def run(dev: str, tap: str, shape: Shape, seed: int) -> None:
    rng = random.Random(seed)
    fd, out = open_tap(tap), bypass_socket(dev)
    held: list[tuple[float, int, bytes]] = []  # (release time, arrival number, frame)
    arrivals = 0
    signal.signal(signal.SIGTERM, _stop)
    print("ready", flush=True)
    try:
        while True:
            timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
            readable, _, _ = select.select([fd], [], [], timeout)
            now = time.monotonic()
            while readable:
                try:
                    frame = os.read(fd, 65536)
                except BlockingIOError:
                    break
                at = shape.release_at(now, rng)
                if at is not None:
                    heapq.heappush(held, (at, arrivals, frame))
                arrivals += 1
            while held and held[0][0] <= now:
                _send(out, heapq.heappop(held)[2])
    except _Stop:
        while held:  # removing the link's slowness should not also drop what it holds
            _send(out, heapq.heappop(held)[2])


def _send(out: socket.socket, frame: bytes) -> None:
    try:
        out.send(frame)
    except OSError:  # a full device queue or a gone peer drops the frame, as a wire would
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ledgermq.chaos.shaper",
                                description="shape the frames DEV sends (see module doc)")
    p.add_argument("dev")
    p.add_argument("--tap", default="shape0")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss-pct", type=float, default=0.0)
    p.add_argument("--reorder-pct", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        shape = Shape(a.delay_ms, a.jitter_ms, a.loss_pct, a.reorder_pct)
        run(a.dev, a.tap, shape, a.seed)
    except (ValueError, OSError) as e:
        print(f"shaper: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
