"""The deterministic world every simulated protocol runs in: virtual time, a seeded RNG,
an event queue, a faulty network and a readable trace.

Nothing here knows a protocol; `raft.py` (and later designs) put nodes in it.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class SimResult:
    seed: int
    ok: bool
    steps: int
    virtual_ms: int
    violation: str = ""
    trace: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


class Violation(Exception):
    """An invariant the checker found broken."""


@dataclass
class NetworkFaults:
    loss: float = 0.0  # probability a message is dropped
    duplicate: float = 0.0  # probability a message is delivered twice
    min_delay_ms: int = 1
    max_delay_ms: int = 10
    blocked: set[tuple[str, str]] = field(default_factory=set)  # (src, dst) cut one way

    def heal(self) -> None:
        self.loss = self.duplicate = 0.0
        self.blocked.clear()


class World:
    def __init__(self, seed: int, trace_len: int = 80):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self.net = NetworkFaults()
        self.trace: deque[str] = deque(maxlen=trace_len)
        self.steps = 0

    def at(self, delay_ms: int, kind: str, payload: Any = None) -> None:
        heapq.heappush(self._queue, (self.now + max(0, delay_ms), next(self._seq), kind, payload))

    def send(self, src: str, dst: str, msg: Any) -> None:
        """Hand a message to the network: maybe lost, maybe duplicated, always delayed."""
        if (src, dst) in self.net.blocked or self.rng.random() < self.net.loss:
            return
        copies = 2 if self.rng.random() < self.net.duplicate else 1
        for _ in range(copies):
            self.at(self.rng.randint(self.net.min_delay_ms, self.net.max_delay_ms),
                    "deliver", (dst, msg))

    def next_event(self) -> tuple[str, Any] | None:
        if not self._queue:
            return None
        t, _, kind, payload = heapq.heappop(self._queue)
        self.now = t
        self.steps += 1
        return kind, payload

    def log(self, text: str) -> None:
        self.trace.append(f"{self.now:>8}ms {text}")

    def partition(self, groups: list[set[str]]) -> None:
        """Cut every link between different groups (both ways)."""
        for a, b in itertools.permutations(range(len(groups)), 2):
            for x in groups[a]:
                for y in groups[b]:
                    self.net.blocked.add((x, y))

    def bridge(self, nodes: list[str]) -> None:
        """Only the middle node talks to both sides."""
        mid = nodes[len(nodes) // 2]
        left = set(nodes[:len(nodes) // 2])
        right = set(nodes[len(nodes) // 2 + 1:])
        self.partition([left, right])
        self.log(f"bridge partition through {mid}: {sorted(left)} | {sorted(right)}")

    def run_until(self, stop: Callable[[], bool], handle: Callable[[str, Any], None],
                  max_steps: int) -> None:
        while not stop() and self.steps < max_steps:
            ev = self.next_event()
            if ev is None:
                return
            handle(*ev)
