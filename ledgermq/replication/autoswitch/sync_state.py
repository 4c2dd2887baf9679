"""The master's side of the SyncStateSet in controller mode (S1-2), sans-IO.

The master tracks each slave's acked offset. A slave catches up when its ack reaches the
master's end as it was at a transfer to it, and then as of that transfer's time (RocketMQ's
`lastMasterMaxOffset` / `lastTransferTimeMs`): under steady load a healthy slave acks each
push a little after the master appended more, so it never reaches the master's *current*
end. A member that has not caught up for `max_not_catch_up_ms` is dropped; a slave whose ack reaches the confirm
offset (the minimum ack over the set) is taken in; asynchronous learners never are (a
member that reconnects as a learner is dropped).
Changes are proposals to the controller (AlterSyncStateSet); the set only changes here
when the controller's answer comes back (`applied`). A write is acknowledged once every
member holds it (`allAckInSyncStateSet`), or `in_sync_replicas` of them do, and never with
fewer than `min_in_sync_replicas` members; while a change is in flight, members of the old
and of the proposed set all count (the controller may hold either).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# transfers remembered per slave until its ack covers them (a slave that stops acking
# gains nothing from older ones: only the newest it acks dates its catch-up)
MAX_TRANSFERS_KEPT = 1024


@dataclass(frozen=True)
class ProposeSyncStateSet:
    members: tuple[int, ...]
    set_epoch: int  # the epoch of the set this changes


@dataclass(frozen=True)
class SyncConfig:
    max_not_catch_up_ms: int = 15_000  # haMaxTimeSlaveNotCatchUp
    all_ack: bool = True  # allAckInSyncStateSet (ledgermq's default: the safe one)
    in_sync_replicas: int = 1  # inSyncReplicas (used when all_ack is off)
    min_in_sync_replicas: int = 1  # minInSyncReplicas
    proposal_timeout_ms: int = 5000  # no answer from the controller: propose again


BUGS = {"expand-before-confirm": "a slave joins the SyncStateSet as soon as it reports, "
                                 "before it holds what the set has acknowledged"}


class SyncStateTracker:
    def __init__(self, master_id: int, members: tuple[int, ...], set_epoch: int,
                 master_end: int, now: int, config: SyncConfig | None = None,
                 learners: frozenset[int] = frozenset(), bug: str | None = None):
        self.master_id = master_id
        self.members = tuple(sorted(set(members) | {master_id}))
        self.set_epoch = set_epoch
        self.config = config or SyncConfig()
        self.learners = learners
        self.master_end = master_end
        # a master that just took over (or restarted) does not know its members' acks:
        # anything up to its log end may have been acknowledged before
        self.floor = master_end
        self.acks: dict[int, int] = {}
        self.caught_up_at: dict[int, int] = {m: now for m in self.members}
        # per slave, (the master's end, time) of each transfer its acks have not covered
        self.transfers: dict[int, deque[tuple[int, int]]] = {}
        self.pending: ProposeSyncStateSet | None = None
        self.proposed_at = 0
        self.bug = bug

    def controller_view(self, members: tuple[int, ...], set_epoch: int, now: int) -> None:
        """The group as the controller holds it (each heartbeat's answer): a newer set is
        the truth, whether or not our proposal's answer arrived."""
        if set_epoch > self.set_epoch:
            self.applied(members, set_epoch, now)

    # ---- offsets ----------------------------------------------------------------------
    def ack_of(self, broker: int) -> int:
        return self.master_end if broker == self.master_id else self.acks.get(broker, 0)

    @property
    def ack_set(self) -> tuple[int, ...]:
        """Whose acks a write needs. While a change is in flight the controller may already
        hold the new set, so both count: a member being added must hold every write
        acknowledged from now on, or electing it could lose them."""
        if self.pending is None:
            return self.members
        return tuple(sorted(set(self.members) | set(self.pending.members)))

    @property
    def confirm_offset(self) -> int:
        """What every SyncStateSet member holds (sent to slaves in each transfer header)."""
        return min(self.ack_of(m) for m in self.ack_set)

    def acknowledged(self, end: int) -> bool | None:
        """Is a write ending at `end` acknowledged? None: the set is too small to ever
        acknowledge it (fewer than min_in_sync_replicas members) — say so to the sender."""
        cfg = self.config
        smallest = min(len(self.members), len(self.pending.members) if self.pending
                       else len(self.members))
        if smallest < cfg.min_in_sync_replicas:
            return None
        members = self.ack_set
        holders = sum(1 for m in members if self.ack_of(m) >= end)
        need = len(members) if cfg.all_ack else min(cfg.in_sync_replicas, len(members))
        return holders >= need

    # ---- events -----------------------------------------------------------------------
    def appended(self, master_end: int) -> None:
        self.master_end = master_end

    def transferred(self, slave: int, now: int) -> None:
        """The master sent `slave` bytes (or a heartbeat) while its log ended at master_end."""
        sent = self.transfers.setdefault(slave, deque(maxlen=MAX_TRANSFERS_KEPT))
        if sent and sent[-1][0] == self.master_end:
            sent[-1] = (self.master_end, now)  # the same end, later: the later time counts
        else:
            sent.append((self.master_end, now))

    def ack(self, slave: int, offset: int, now: int) -> list[ProposeSyncStateSet]:
        self.acks[slave] = max(self.acks.get(slave, 0), offset)
        sent = self.transfers.get(slave)
        while sent and sent[0][0] <= offset:  # it holds what the master had then
            self.caught_up_at[slave] = max(self.caught_up_at.get(slave, 0), sent.popleft()[1])
        if offset >= self.master_end:
            self.caught_up_at[slave] = now
        caught_up = offset >= max(self.confirm_offset, self.floor) or \
            self.bug == "expand-before-confirm"
        if slave not in self.members and slave not in self.learners and caught_up:
            return self._propose(tuple(sorted(self.members + (slave,))), now)
        return []

    def tick(self, now: int) -> list[ProposeSyncStateSet]:
        if self.pending is not None:
            if now - self.proposed_at > self.config.proposal_timeout_ms:
                self.proposed_at = now  # no answer: ask again (the set epoch fences copies)
                return [self.pending]
            return []
        # members that fell behind too long, and members that came back as learners
        late = [m for m in self.members if m != self.master_id and (
            m in self.learners or
            now - self.caught_up_at.get(m, now) > self.config.max_not_catch_up_ms)]
        if late:
            return self._propose(tuple(m for m in self.members if m not in late), now)
        return []

    def _propose(self, members: tuple[int, ...], now: int) -> list[ProposeSyncStateSet]:
        if self.pending is not None or members == self.members:
            return []  # one change in flight at a time
        self.pending = ProposeSyncStateSet(members, self.set_epoch)
        self.proposed_at = now
        return [self.pending]

    def applied(self, members: tuple[int, ...] | None, set_epoch: int, now: int,
                maybe_applied: bool = False) -> None:
        """The controller answered: the new set, or None: refused, keep the old one. A
        refusal that may answer a copy of a proposal that did apply (a stale set epoch, a
        deposed master, no answer at all) leaves the change pending, old and new members
        both counting, until a view says which set the controller holds."""
        if members is None and maybe_applied:
            return
        self.pending = None
        if members is None:
            return
        self.members, self.set_epoch = tuple(sorted(members)), set_epoch
        for m in self.members:
            self.caught_up_at.setdefault(m, now)
