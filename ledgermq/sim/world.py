"""The deterministic world every simulated protocol runs in: virtual time, a seeded RNG,
an event queue, a faulty network and a trace.

Nothing here knows a protocol: the simulators put nodes in it and the harness runs it.
Determinism: the only sources of choice are `rng` and the queue's order, which is (time,
order of scheduling), never the events themselves; so a seed replays exactly.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .events import Deliver
from .result import SimResult, Violation

__all__ = ["NetworkFaults", "SimResult", "Violation", "World"]

MIN_DELAY_MS, MAX_DELAY_MS = 1, 10


@dataclass
class NetworkFaults:
    loss: float = 0.0  # probability a message is dropped
    duplicate: float = 0.0  # probability a message is delivered twice
    min_delay_ms: int = MIN_DELAY_MS
    max_delay_ms: int = MAX_DELAY_MS
    blocked: set[tuple[str, str]] = field(default_factory=set)  # (src, dst) cut one way

    def heal(self) -> None:
        """Partitions and loss end (delays stay as they were)."""
        self.loss = self.duplicate = 0.0
        self.blocked.clear()

    def calm(self) -> None:
        """Every network fault ends, slow delivery too: the settling phase's network."""
        self.heal()
        self.min_delay_ms, self.max_delay_ms = MIN_DELAY_MS, MAX_DELAY_MS


class World:
    def __init__(self, seed: int, *, trace_events: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()
        self.net = NetworkFaults()
        self.trace: list[str] = []  # every line, never cut: a replay compares them all
        self.trace_events = trace_events  # also trace every event run (replay tests)
        self.steps = 0

    def at(self, delay_ms: int, event: Any) -> None:
        heapq.heappush(self._queue, (self.now + max(0, delay_ms), next(self._seq), event))

    def send(self, src: str, dst: str, msg: Any) -> None:
        """Hand a message to the network: maybe lost, maybe duplicated, always delayed."""
        if (src, dst) in self.net.blocked or self.rng.random() < self.net.loss:
            return
        copies = 2 if self.rng.random() < self.net.duplicate else 1
        for _ in range(copies):
            self.at(self.rng.randint(self.net.min_delay_ms, self.net.max_delay_ms),
                    Deliver(dst, msg))

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

    def run_until(self, stop: Callable[[], bool], handle: Callable[[Any], None],
                  max_steps: int) -> None:
        """Run events in time order until `stop()` holds (checked before each one), the
        step count reaches `max_steps`, or nothing is left to happen."""
        queue, pop = self._queue, heapq.heappop
        while queue and self.steps < max_steps and not stop():
            self.now, _, event = pop(queue)
            self.steps += 1
            if self.trace_events:
                self.log(repr(event))
            handle(event)
