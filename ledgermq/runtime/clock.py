"""The one clock the drivers and servers read for timeouts: monotonic milliseconds (the
sans-IO cores take it as an argument, never read it)."""
from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.monotonic() * 1000)
