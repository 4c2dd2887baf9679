"""Long polling: a pull that finds nothing new waits here until its queue grows or its
suspend time runs out. The store tells us of every dispatch (on the event-loop thread for
local writes; other threads are handed over with call_soon_threadsafe)."""
from __future__ import annotations

import asyncio
import threading


class PullHolds:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._thread = threading.get_ident()
        self._waiting: dict[tuple[str, int], list[tuple[int, asyncio.Future[bool]]]] = {}

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """True when the queue's max offset passed `offset` within `timeout_s`."""
        fut: asyncio.Future[bool] = self.loop.create_future()
        key = (topic, queue_id)
        self._waiting.setdefault(key, []).append((offset, fut))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters[:] = [w for w in waiters if w[1] is not fut]
                if not waiters:
                    del self._waiting[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener."""
        if threading.get_ident() != self._thread:
            self.loop.call_soon_threadsafe(self.notify, topic, queue_id, max_offset)
            return
        waiters = self._waiting.get((topic, queue_id))
        if not waiters:
            return
        for offset, fut in waiters:
            if max_offset > offset and not fut.done():
                fut.set_result(True)

    @property
    def held(self) -> int:
        return sum(len(w) for w in self._waiting.values())
