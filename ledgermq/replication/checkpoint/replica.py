"""A broker's role in a checkpoint-mode group (S3), sans-IO: it turns the control node's
views and promotions into role changes for its driver.

A broker writes only while the control node names it master of the current epoch, and
follows only the master the control node names, after truncating to the takeover offset
of every failover it missed (S3-6). With no view yet, or a failover under way, it WAITs:
neither writes nor follows.

Promotion is crash-safe: the takeover offset is persisted before the first cached message
is replayed, and the replay's outcome after it, so a broker restarted mid-promotion
truncates back to the takeover and replays again, or repeats its answer.
"""
from __future__ import annotations

from dataclasses import dataclass

from .control import Promote, View


@dataclass(frozen=True)
class Promotion:
    epoch: int
    takeover: int
    replayed: tuple[tuple[int, int, int], ...] | None = None  # (old offset, new, new end)
    log_end: int = 0


@dataclass(frozen=True)
class Truncate:
    offset: int


@dataclass(frozen=True)
class Follow:
    master_addr: str
    slot: int


@dataclass(frozen=True)
class Lead:
    epoch: int
    checkpoint: int
    members: tuple[tuple[int, int], ...]
    slot: int


def lead_start(lead: Lead, saved: tuple[int, int, dict[int, int]]
               ) -> tuple[int, dict[int, int]]:
    """The checkpoint and members (slot -> recorded ack) a master of `lead.epoch` starts
    from; `saved` is its checkpoint file (epoch, checkpoint, members).

    Restarted in the same epoch, its file's checkpoint is the newer one, but not always
    its members: a joining slave counts at once and the heartbeat names it to the control
    node while the file save naming it is still under way. The control node may promote
    any member it saved, so every member either record names is counted (one the control
    node dropped but the file still names only counts until it is dropped again)."""
    epoch, checkpoint, members = saved
    if epoch != lead.epoch:
        return lead.checkpoint, dict(lead.members)
    both = dict(lead.members)
    for slot, acked in members.items():
        both[slot] = max(acked, both.get(slot, acked))
    both.pop(lead.slot, None)  # (never its own)
    return max(checkpoint, lead.checkpoint), both


@dataclass(frozen=True)
class Replay:
    """Append, in order, each cached entry that lies at or past `takeover`; then call
    `replayed` with where each landed."""

    promote: Promote
    takeover: int


@dataclass(frozen=True)
class AnswerPromotion:
    promotion: Promotion


@dataclass(frozen=True)
class Stand:
    reason: str  # neither write nor follow


@dataclass(frozen=True)
class SaveRole:
    epoch: int
    promotion: Promotion | None


RoleAction = Truncate | Follow | Lead | Replay | AnswerPromotion | Stand | SaveRole


class CheckpointReplica:
    def __init__(self, epoch: int = 0, promotion: Promotion | None = None):
        self.epoch = epoch
        self.promotion = promotion
        self.role = "WAIT"
        self.master_addr: str | None = None
        self.slot = 0

    def _save(self) -> SaveRole:
        return SaveRole(self.epoch, self.promotion)

    def on_view(self, view: View, log_end: int) -> list[RoleAction]:
        self.slot = view.slot
        p = self.promotion
        if p is not None and view.epoch < p.epoch:
            return []  # promoting: older views (sent before the promotion) do not count
        if view.epoch < self.epoch:  # from a control node behind the group's state (a
            return []                 # stale leader of a group): it may not move anyone
        if view.role == "WAIT":
            if self.role in ("MASTER", "SLAVE"):
                self.role, self.master_addr = "WAIT", None
                return [Stand("the control node has no master for the group now")]
            return []
        out: list[RoleAction] = []
        if view.role == "MASTER":
            if self.role == "MASTER" and self.epoch == view.epoch:
                return []
            if log_end < view.checkpoint:
                # restarted on a replaced disk: leading would lose what was acknowledged;
                # the control node sees the short log and fails over
                return []
            self.role, self.epoch, self.master_addr = "MASTER", view.epoch, None
            self.promotion = None
            return [self._save(), Lead(view.epoch, view.checkpoint, view.members, view.slot)]
        if self.role == "SLAVE" and self.epoch == view.epoch \
                and self.master_addr == view.master_addr and p is None:
            return []
        assert view.master_addr is not None  # (a SLAVE view names its master)
        if self.role == "MASTER":
            out.append(Stand(f"deposed: epoch {view.epoch} has master {view.master_addr}"))
        cut = [t for t in (view.truncate_to, p.takeover if p else None) if t is not None]
        if cut and min(cut) < log_end:
            out.append(Truncate(min(cut)))
        self.role, self.epoch, self.master_addr = "SLAVE", view.epoch, view.master_addr
        self.promotion = None
        return out + [self._save(), Follow(view.master_addr, view.slot)]

    def on_promote(self, promote: Promote, log_end: int) -> list[RoleAction]:
        p = self.promotion
        if p is not None and p.epoch == promote.epoch:
            if p.replayed is not None:
                return [AnswerPromotion(p)]
            out: list[RoleAction] = [Truncate(p.takeover)] if log_end > p.takeover else []
            return out + [Replay(promote, p.takeover)]
        if promote.epoch <= self.epoch or log_end < promote.checkpoint:
            return []  # (a log below the checkpoint is not the copy the control node counted)
        self.role, self.master_addr = "PROMOTING", None
        self.promotion = Promotion(promote.epoch, log_end)
        return [Stand("promoting"), self._save(), Replay(promote, log_end)]

    def replayed(self, moved: list[tuple[int, int, int]], log_end: int) -> list[RoleAction]:
        p = self.promotion
        assert p is not None  # (answers its Replay)
        self.promotion = Promotion(p.epoch, p.takeover, tuple(moved), log_end)
        return [self._save(), AnswerPromotion(self.promotion)]
