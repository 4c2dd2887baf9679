"""What a simulated run reports, and how a checker says that an invariant broke."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


class Violation(Exception):
    """An invariant the checker found broken. `invariant` names it for machines (a key of
    the simulator's INVARIANTS: tests map each injected bug to the one it must break);
    the message says how, for people."""

    def __init__(self, invariant: str, message: str):
        super().__init__(message)
        self.invariant = invariant


@dataclass
class SimResult:
    seed: int
    ok: bool
    steps: int
    virtual_ms: int
    violation: str = ""  # what broke, in words ("" when ok)
    invariant: str = ""  # which invariant broke, by name ("" when ok)
    trace: list[str] = field(default_factory=list)  # the whole trace, every line of it
    stats: dict = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """One hash of every trace line: two runs of a seed must agree on it."""
        h = hashlib.blake2b(digest_size=16)
        for line in self.trace:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

    def tail(self, lines: int = 80) -> list[str]:
        """The last lines of the trace, for display."""
        return self.trace[-lines:]
