"""The shape every background service of the broker shares (delayed delivery, timers,
transaction check-backs, POP revive, housekeeping): a round every so often, only while
the broker may change state, and never dying of one failed round."""
from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Awaitable, Callable

log = logging.getLogger(__name__)


Round = Callable[[], "bool | None | Awaitable[bool | None]"]


async def run_rounds(what: str, interval_s: float, round_: Round,
                     *, active: Callable[[], bool] = lambda: True,
                     on_inactive: Callable[[], None] | None = None,
                     rest: Callable[[], Awaitable[None]] | None = None,
                     inactive_s: float | None = None) -> None:
    """Run `round_` every `interval_s` seconds while `active()` (usually: this broker is
    the writable master), until cancelled. A round that raises is logged and the next one
    tries again (one unreadable message or a full disk must not stop a service for good).
    A round that returns True has more to do: the next starts at once, after the requests
    waiting on the event loop; one that returns False or None waits `interval_s`.
    `on_inactive` runs on every round skipped, `inactive_s` apart (default `interval_s`).
    `rest`, when given, is awaited instead of the `interval_s` wait (a service that knows
    when it is next needed)."""
    while True:
        if not active():
            if on_inactive is not None:
                on_inactive()
            await asyncio.sleep(interval_s if inactive_s is None else inactive_s)
            continue
        try:
            more = round_()
            if inspect.isawaitable(more):
                more = await more
        except Exception:  # noqa: BLE001 - the next round tries again
            log.exception("%s round failed", what)
            more = False
        if more is True:
            await asyncio.sleep(0)
        elif rest is not None:
            await rest()
        else:
            await asyncio.sleep(interval_s)
