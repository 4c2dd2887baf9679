"""The master's side of the SyncStateSet in controller mode (S1-2), sans-IO.

The master tracks each slave's acked offset. A member that has not caught up (acked the
master's end) for `max_not_catch_up_ms` is dropped; a slave whose ack reaches the confirm
offset (the minimum ack over the set) is taken in; asynchronous learners never are.
Changes are proposals to the controller (AlterSyncStateSet); the set only changes here
when the controller's answer comes back (`applied`). A write is acknowledged once every
member holds it (`allAckInSyncStateSet`), or `in_sync_replicas` of them do, and never with
fewer than `min_in_sync_replicas` members.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProposeSyncStateSet:
    members: tuple[int, ...]
    set_epoch: int  # the epoch of the set this changes


@dataclass(frozen=True)
class SyncConfig:
    max_not_catch_up_ms: int = 15_000  # haMaxTimeSlaveNotCatchUp
    all_ack: bool = False  # allAckInSyncStateSet
    in_sync_replicas: int = 1  # inSyncReplicas (used when all_ack is off)
    min_in_sync_replicas: int = 1  # minInSyncReplicas


class SyncStateTracker:
    def __init__(self, master_id: int, members: tuple[int, ...], set_epoch: int,
                 master_end: int, now: int, config: SyncConfig | None = None,
                 learners: frozenset[int] = frozenset()):
        self.master_id = master_id
        self.members = tuple(sorted(set(members) | {master_id}))
        self.set_epoch = set_epoch
        self.config = config or SyncConfig()
        self.learners = learners
        self.master_end = master_end
        self.acks: dict[int, int] = {}
        self.caught_up_at: dict[int, int] = {m: now for m in self.members}
        self.pending: ProposeSyncStateSet | None = None

    # ---- offsets ----------------------------------------------------------------------
    def ack_of(self, broker: int) -> int:
        return self.master_end if broker == self.master_id else self.acks.get(broker, 0)

    @property
    def confirm_offset(self) -> int:
        """What every SyncStateSet member holds (sent to slaves in each transfer header)."""
        return min(self.ack_of(m) for m in self.members)

    def acknowledged(self, end: int) -> bool | None:
        """Is a write ending at `end` acknowledged? None: the set is too small to ever
        acknowledge it (fewer than min_in_sync_replicas members) — say so to the sender."""
        cfg = self.config
        if len(self.members) < cfg.min_in_sync_replicas:
            return None
        holders = sum(1 for m in self.members if self.ack_of(m) >= end)
        need = len(self.members) if cfg.all_ack else min(cfg.in_sync_replicas,
                                                          len(self.members))
        return holders >= need

    # ---- events -----------------------------------------------------------------------
    def appended(self, master_end: int) -> None:
        self.master_end = master_end

    def ack(self, slave: int, offset: int, now: int) -> list:
        self.acks[slave] = max(self.acks.get(slave, 0), offset)
        if offset >= self.master_end:
            self.caught_up_at[slave] = now
        if slave not in self.members and slave not in self.learners \
                and offset >= self.confirm_offset:
            return self._propose(tuple(sorted(self.members + (slave,))))
        return []

    def tick(self, now: int) -> list:
        late = [m for m in self.members if m != self.master_id and
                now - self.caught_up_at.get(m, now) > self.config.max_not_catch_up_ms]
        if late:
            return self._propose(tuple(m for m in self.members if m not in late))
        return []

    def _propose(self, members: tuple[int, ...]) -> list:
        if self.pending is not None or members == self.members:
            return []  # one change in flight at a time
        self.pending = ProposeSyncStateSet(members, self.set_epoch)
        return [self.pending]

    def applied(self, members: tuple[int, ...] | None, set_epoch: int, now: int) -> None:
        """The controller answered: the new set (or None: refused, keep the old one)."""
        self.pending = None
        if members is None:
            return
        self.members, self.set_epoch = tuple(sorted(members)), set_epoch
        for m in self.members:
            self.caught_up_at.setdefault(m, now)
