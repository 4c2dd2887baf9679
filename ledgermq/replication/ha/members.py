"""Who the consistent checkpoint (S3) counts, and how a slave stops and starts counting.

The checkpoint is the minimum ack over the member slaves, and the control node picks the
next master among the members it knows. So the two must agree in one direction: every
member the control node knows holds the checkpoint. Hence:

- A slave joins once it has acked the current checkpoint and the master's log as it was
  when it began leading (an earlier master may have acknowledged more than the checkpoint
  it handed on). Joining only makes the min stricter, so the master applies it at once
  and the control node learns it afterwards.
- A member leaves when no report came from it for `member_timeout_ms` (on any link), or
  when it reports less than the master recorded for it (its disk was replaced: the copy
  the checkpoint counted is gone). Leaving is only proposed: the member keeps counting
  until the control node has saved a membership without it, and only then is it dropped
  and may the checkpoint move past it. A member that reports its recorded ack again
  before that stays.

Each distinct proposal gets a version (increasing, seeded from the clock, and raised past
any newer one the control node holds, a restarted master's predecessor's): the control
node keeps only a newer one, and a drop applies only when the control node confirms the
current version.
"""
from __future__ import annotations

from collections.abc import Iterable

# Known bugs the simulator must catch (`--inject-bug`).
BUGS = {
    "members-never-dropped": "a member that never comes back holds the checkpoint forever",
    "drop-before-saved": "a silent member is dropped before the control node saved it",
}


class Membership:
    def __init__(self, members: dict[int, int], now: int, timeout_ms: int,
                 bug: str | None = None):
        self.acks: dict[int, int] = dict(members)  # slave id -> acked offset (counted)
        self.heard = {sid: now for sid in self.acks}
        self.leaving: dict[int, str] = {}  # slave id -> why; still counted until saved
        self.timeout_ms = timeout_ms
        self.bug = bug
        self.version = now
        self._proposed = self._ids()

    def _ids(self) -> tuple[int, ...]:
        return tuple(sorted(s for s in self.acks if s not in self.leaving))

    def proposal(self) -> tuple[int, tuple[int, ...]]:
        """(version, member ids) for the control node to save."""
        ids = self._ids()
        if ids != self._proposed:
            self._proposed, self.version = ids, self.version + 1
        return self.version, ids

    def floor(self) -> int | None:
        """The least ack the checkpoint counts (None without members)."""
        return min(self.acks.values(), default=None)

    def reported(self, sid: int, acked: int, join_at: int, now: int) -> bool:
        """A report from slave `sid` whose link has acked `acked`: True if the members
        changed (it joined)."""
        self.heard[sid] = now
        record = self.acks.get(sid)
        if record is None:
            if acked < join_at:
                return False  # catching up: joins once it holds what may be acknowledged
            self.acks[sid] = acked
            return True
        if acked < record:  # a copy the checkpoint counted is gone
            self.leaving.setdefault(sid, f"reports {acked}, below its recorded ack {record}")
        else:
            self.leaving.pop(sid, None)
            self.acks[sid] = acked
        return False

    def expire(self, now: int) -> list[int]:
        """Propose to drop the members silent for too long; returns those dropped at once
        (only under the injected bug that skips the control node)."""
        if self.bug == "members-never-dropped":
            return []
        silent = [s for s in self.acks if s not in self.leaving
                  and now - self.heard.get(s, now) >= self.timeout_ms]
        for sid in silent:
            self.leaving[sid] = f"no report for {self.timeout_ms} ms"
        if self.bug == "drop-before-saved":
            return self._drop(silent)
        return []

    def saved(self, version: int, ids: Iterable[int]) -> list[int]:
        """The control node saved proposal `version` naming `ids`: drop the leaving members
        it no longer names. Returns the dropped ids."""
        if version > self.version:  # a predecessor's: ours must outrank it to be saved
            self.version = version + 1
            return []
        if version != self.version or tuple(sorted(ids)) != self._proposed:
            return []  # an answer to an older proposal
        return self._drop([s for s in self.leaving if s not in self._proposed])

    def _drop(self, sids: list[int]) -> list[int]:
        for sid in sids:
            self.acks.pop(sid, None)
            self.leaving.pop(sid, None)
        return sids
