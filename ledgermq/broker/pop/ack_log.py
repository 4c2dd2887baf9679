"""Acks go to the log in groups: every ack asked for during one turn of the event loop is
written in one append (one record per queue), and each asker is answered once the mode
acknowledges that write. A consumer acks each message on its own request (RocketMQ's
proxy, its SimpleConsumer and PushConsumer do), so under load many acks arrive in one
read; one write each cost an append, a wake-up of every replica and a wait apiece."""
from __future__ import annotations

import asyncio
import inspect
from typing import Awaitable, Callable

from .bookkeeping import Key

Acks = list[tuple[Key, int]]


class AckLog:
    def __init__(self, write: Callable[[Acks], str | None | Awaitable[str | None]]):
        """`write(acks)`: writes them; None when the mode acknowledged the write, else why
        not: said at once (a single node), or an awaitable of it (a mode that waits)."""
        self._write = write
        self._queued: Acks = []
        self._waiters: list[asyncio.Future[str | None]] = []

    def log(self, acks: Acks) -> asyncio.Future[str | None]:
        """A future of what `write` says of the group `acks` went out in."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[str | None] = loop.create_future()
        if not self._waiters:
            loop.call_soon(self._flush)
        self._queued += acks
        self._waiters.append(waiter)
        return waiter

    def _flush(self) -> None:
        acks, waiters = self._queued, self._waiters
        self._queued, self._waiters = [], []
        try:
            written = self._write(acks)
        except Exception as e:  # (a write that failed at once fails its askers)
            _answer(waiters, None, e)
            return
        if not inspect.isawaitable(written):
            _answer(waiters, written, None)  # (no task, no turn: the usual single node)
            return
        task = asyncio.ensure_future(written)

        def answer(t: asyncio.Future[str | None]) -> None:
            if t.cancelled():
                for w in waiters:
                    w.cancel()
            else:
                _answer(waiters, None if t.exception() else t.result(), t.exception())
        task.add_done_callback(answer)


def _answer(waiters: list[asyncio.Future[str | None]], result: str | None,
            error: BaseException | None) -> None:
    for w in waiters:
        if w.done():
            continue  # (its asker gave up)
        if error is not None:
            w.set_exception(error)
        else:
            w.set_result(result)
