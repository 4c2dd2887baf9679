"""The run / settle / report harness every protocol simulator shares.

A run has two phases:

1. Under faults, for `steps` events. The simulator's Fault events strike while `faulting`
   holds (through the first FAULT_SHARE of the steps; a nemesis that strikes mid-step asks
   the same), and its checks raise Violation the moment an invariant breaks: safety is
   checked after every step, never only at the end.
2. Settling. The network calms, the simulator brings every node back (`recover`), and
   `check_liveness` demands progress within SETTLE_MS of virtual time (through `expect`).

Either way the SimResult carries the whole trace, so a failing seed replays exactly and two
runs of one seed can be compared line by line.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from .events import CLIENT, FAULT
from .result import SimResult, Violation
from .world import World

LIVENESS = "liveness"


def _never() -> bool:
    return False


def _handler_name(cls: type) -> str:
    return "on_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


class Simulation:
    """Base of the protocol simulators. Subclasses name their BUGS (injectable, test-only)
    and INVARIANTS (name -> what it promises), schedule their first events in `start`,
    handle each event class E in `on_<e>`, and say what recovery and progress mean."""

    BUGS: ClassVar[Mapping[str, str]] = {}
    INVARIANTS: ClassVar[Mapping[str, str]] = {}
    FAULT_SHARE: ClassVar[float] = 0.7  # faults strike in this share of the steps
    SETTLE_MS: ClassVar[int] = 10_000  # how long progress may take once faults heal
    SETTLE_STEPS: ClassVar[int] = 200_000  # a backstop; virtual time is the real bound

    def __init__(self, seed: int, *, steps: int, bugs: Iterable[str] = frozenset(),
                 trace_events: bool = False):
        bugs = frozenset(bugs)
        unknown = bugs - set(self.BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        self.bugs = bugs
        self.w = World(seed, trace_events=trace_events)
        self.rng = self.w.rng
        self.steps = steps
        self.settling = False
        self._faults_until = steps * self.FAULT_SHARE  # (the step count faults stop after)
        self._handlers: dict[type, Callable[[Any], None]] = {}

    # ---- what a simulator provides -------------------------------------------------
    def boot_all(self, boot: Callable[[str], None], ticks: Mapping[str, Any],
                 tick_ms: int) -> None:
        """Boot each node and start its ticks at a random phase; then the client and the
        nemesis."""
        for node_id, tick in ticks.items():
            boot(node_id)
            self.w.at(self.rng.randint(0, tick_ms), tick)
        self.w.at(50, CLIENT)
        self.w.at(300, FAULT)

    def start(self) -> None:
        """Boot the nodes and schedule the first events."""
        raise NotImplementedError

    def recover(self) -> None:
        """After the faults: restart every crashed node, resume every paused one."""

    def check_liveness(self) -> None:
        """After recovery: demand progress (with `expect`), or raise Violation."""

    def stats(self) -> dict:
        return {}

    # ---- helpers --------------------------------------------------------------------
    @property
    def faulting(self) -> bool:
        return self.w.steps <= self._faults_until

    def bug_in(self, known: Mapping[str, str]) -> str | None:
        """The injected bug that belongs to `known` (one core's BUGS), if any."""
        return next((b for b in sorted(self.bugs) if b in known), None)

    def handle(self, event: Any) -> None:
        """Run one event: LinkClosed goes to on_link_closed, and so on."""
        (self._handlers.get(type(event)) or self._handler(type(event)))(event)

    def _handler(self, kind: type) -> Callable[[Any], None]:
        handler = self._handlers[kind] = getattr(self, _handler_name(kind))
        return handler

    def wait_for(self, done: Callable[[], bool], within_ms: int | None = None) -> bool:
        """Run until `done()` or `within_ms` (default SETTLE_MS) pass; returns done()."""
        w = self.w
        deadline = w.now + (self.SETTLE_MS if within_ms is None else within_ms)
        w.run_until(lambda: done() or w.now > deadline, self.handle,
                    w.steps + self.SETTLE_STEPS)
        return done()

    def expect(self, done: Callable[[], bool], failure: str,
               within_ms: int | None = None) -> None:
        """Liveness: `done()` must come to hold in time, or the run fails with `failure`."""
        if not self.wait_for(done, within_ms):
            raise Violation(LIVENESS, failure)

    # ---- the run --------------------------------------------------------------------
    def run(self) -> SimResult:
        w = self.w
        try:
            self.start()
            w.run_until(_never, self.handle, self.steps)
            self.settling, self._faults_until = True, -1
            w.net.calm()
            self.recover()
            w.log("all faults healed")
            self.check_liveness()
        except Violation as v:
            if v.invariant not in self.INVARIANTS and v.invariant != LIVENESS:
                raise AssertionError(f"{type(self).__name__} raised an undeclared "
                                     f"invariant {v.invariant!r}") from v
            w.log(f"VIOLATION of {v.invariant}: {v}")
            return SimResult(w.seed, False, w.steps, w.now, str(v), v.invariant, w.trace,
                             self.stats())
        return SimResult(w.seed, True, w.steps, w.now, trace=w.trace, stats=self.stats())
