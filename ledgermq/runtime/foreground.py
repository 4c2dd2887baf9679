"""Running servers in the foreground: event loop choice, signals, orderly shutdown."""
from __future__ import annotations

import asyncio
import logging
import signal
from typing import Awaitable, Callable

log = logging.getLogger(__name__)


def run(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `main(stop_event)` on uvloop (when installed) until SIGINT/SIGTERM."""

    async def wrapper() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    try:
        import uvloop
        uvloop.run(wrapper())
    except ImportError:
        asyncio.run(wrapper())


async def serve_until(stop: asyncio.Event, *servers) -> None:
    """Start `servers` in order, wait for `stop`, stop them in reverse order."""
    started = []
    try:
        for s in servers:
            await s.start()
            started.append(s)
        await stop.wait()
    finally:
        for s in reversed(started):
            try:
                await s.stop()
            except Exception:
                log.exception("error while stopping %s", type(s).__name__)
