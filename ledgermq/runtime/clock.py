"""The clocks every server and client reads, in milliseconds: `mono_ms` for timeouts and
intervals (never jumps), `wall_ms` for what a person or a peer reads as a date (stored
timestamps, delivery times, POP handles). The sans-IO cores take the time as an
argument (`now_ms`) and never read a clock."""
from __future__ import annotations

import time


def mono_ms() -> int:
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)
