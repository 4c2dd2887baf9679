"""Which brokers a producer passes over for a while: RocketMQ's latency fault tolerance.

A broker that did not answer a send (refused, closed, timed out) is isolated for a
while: queue selection skips its queues, so a group that is down or hung costs one failed
attempt, not one for every send that would have picked its queues. Once the time is up
it is tried again (and isolated again if it still does not answer).
"""
from __future__ import annotations

import time

from .message import MessageQueue

FAULT_ISOLATION_S = 10.0


class BrokerFaults:
    def __init__(self, isolate_s: float = FAULT_ISOLATION_S):
        self.isolate_s = isolate_s
        self._until: dict[str, float] = {}  # broker name -> monotonic time it is tried again

    def isolate(self, broker_name: str) -> None:
        now = time.monotonic()
        for name in [b for b, t in self._until.items() if t <= now]:
            del self._until[name]  # an empty table keeps pick() on its fast path
        self._until[broker_name] = now + self.isolate_s

    def isolated(self) -> list[str]:
        now = time.monotonic()
        return sorted(b for b, t in self._until.items() if t > now)

    def pick(self, queues: list[MessageQueue], start: int, avoid: str | None) -> MessageQueue:
        """The queue at `start` round-robin, passing over `avoid` (it just failed) and
        isolated brokers; when every broker is isolated, any but `avoid`."""
        n = len(queues)
        if avoid is None and not self._until:
            return queues[start % n]
        now = time.monotonic()
        for i in range(n):
            q = queues[(start + i) % n]
            if q.broker_name != avoid and self._until.get(q.broker_name, 0) <= now:
                return q
        for i in range(n):
            q = queues[(start + i) % n]
            if q.broker_name != avoid:
                return q
        return queues[start % n]
