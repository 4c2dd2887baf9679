"""The control node of one broker group (S3), sans-IO.

It knows every broker of the group by address (each gets a stable slot number, the
identity the checkpoint's membership uses), who the master is and in which epoch, the
latest consistent checkpoint the master reported, and a cache of messages whose sync
timed out (S3-3). Every change it must not forget is handed to the driver to persist
(SaveState, SaveCache) before the answer that depends on it goes out.

Membership: the master proposes its checkpoint's members with a version (see
`replication/ha/members`); a newer proposal is saved before the answer that names it
goes out, and the master drops a member only once an answer names a proposal without it.
So every member known here holds the master's checkpoint.

Failover (S3-5), as built here:
1. The master's heartbeats stop for `master_timeout_ms`, or its log ends below the
   checkpoint (it restarted on a replaced disk), or it gives the group up (`hand_over`:
   no client reaches it). Nothing of the old master needs to stop for this to be safe:
   its checkpoint cannot pass the chosen member's log end once that one stops following.
2. The live member slave with the highest reported offset, at least the checkpoint, is
   chosen (given up if its log turns out shorter before it answered). Promote tells it to
   stop following, note its log end T (the takeover offset), append in order every cached
   message that lies past T, and become master of epoch+1.
3. `promoted()` records (epoch, T). Every other broker of the group, the old master
   included when it returns, truncates its log to T before following the new master:
   up to T all logs are byte-identical prefixes of the old master's stream; past T only
   the new master's log counts.
Cached entries stay until a checkpoint of the new lineage covers them (a replayed entry is
re-keyed to where the new master wrote it), so a second failover still finds them.

A PENDING send (S3-4) made in epoch e resolves DONE if a failover followed e and its end
is <= that failover's T (the new master holds it at the same offset), RESEND if its end
is past T; with no failover since, DONE once the checkpoint covers it, else UNKNOWN (ask
again later).
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

BUGS = {
    "failover-skips-cache": "the new master is promoted without the cached messages",
    "no-rollback": "a returning old master follows the new one without rolling back "
                   "what lies past the takeover offset",
    "hand-over-skips-cache": "a failover a master asked for promotes without the cached "
                             "messages",
}


REPLAYED_KEPT = 10_000  # replayed message ids remembered for PENDING resolution


class Resolution(enum.Enum):
    DONE = "DONE"
    RESEND = "RESEND"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class ControlConfig:
    master_timeout_ms: int = 1000
    max_cache_bytes: int = 256 << 20


@dataclass
class Cached:
    offset: int
    end: int
    msg_id: str
    data: bytes  # the stored bytes of the message(s), as the master wrote them

    def tail(self, at: int) -> bytes:
        """The stored messages that lie at or past `at` (a message boundary: a takeover
        offset inside a batch falls between two of its messages)."""
        return self.data[max(0, at - self.offset):]


@dataclass
class Broker:
    slot: int
    addr: str
    max_offset: int = 0
    heard_at: int = -1 << 60
    epoch: int = 0  # the epoch whose master it last followed or led


@dataclass
class View:
    """What a heartbeat is answered with."""

    epoch: int
    role: str  # MASTER | SLAVE | WAIT (no decision yet: do not write, do not follow)
    slot: int
    master_addr: str | None
    checkpoint: int
    members: tuple[tuple[int, int], ...]
    truncate_to: int | None  # roll the log back to this before following (S3-6)
    members_version: int = 0  # the master's membership proposal the members are


@dataclass(frozen=True)
class SaveState:
    state: dict[str, Any]  # persist (small JSON) before answering


@dataclass(frozen=True)
class SaveCache:
    entry: Cached | None  # append this entry durably; None: rewrite the whole cache


@dataclass(frozen=True)
class Promote:
    addr: str
    slot: int
    epoch: int
    replay: tuple[Cached, ...]
    checkpoint: int
    members: tuple[tuple[int, int], ...]


ControlAction = SaveState | SaveCache | Promote  # what the driver does, in order


@dataclass
class GroupState:
    epoch: int = 0
    master: int | None = None  # slot
    checkpoint: int = 0
    members: list[int] = field(default_factory=list)  # slots the master's checkpoint spans
    takeovers: list[tuple[int, int]] = field(default_factory=list)  # (epoch, T)
    slots: dict[str, int] = field(default_factory=dict)  # addr -> slot
    promoting: int | None = None  # slot being promoted
    replayed: list[str] = field(default_factory=list)  # ids of recently replayed messages
    members_version: int = 0  # the master's proposal they come from (0: from a failover)

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "master": self.master, "checkpoint": self.checkpoint,
                "members": self.members, "membersVersion": self.members_version,
                "takeovers": self.takeovers, "slots": self.slots,
                "promoting": self.promoting, "replayed": self.replayed}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "GroupState":
        return cls(d["epoch"], d["master"], d["checkpoint"],
                   list(d["members"]),
                   [tuple(t) for t in d["takeovers"]], dict(d["slots"]), d.get("promoting"),
                   list(d.get("replayed", ())), d.get("membersVersion", 0))


class GroupControl:
    def __init__(self, config: ControlConfig, now: int, state: GroupState | None = None,
                 cache: list[Cached] | None = None, bug: str | None = None):
        self.config = config
        self.state = state or GroupState()
        self.cache: list[Cached] = sorted(cache or [], key=lambda c: c.offset)
        self.cache_bytes = sum(len(c.data) for c in self.cache)
        self.brokers: dict[int, Broker] = {slot: Broker(slot, addr)
                                           for addr, slot in self.state.slots.items()}
        self.started_at = now  # a restarted control node gives the master time to show up
        self._promote_sent = -1 << 60
        self.bug = bug

    def _save(self) -> SaveState:
        return SaveState(self.state.to_json())

    # ---- heartbeats ---------------------------------------------------------------
    def heartbeat(self, addr: str, wants_master: bool, epoch: int, max_offset: int,
                  now: int, checkpoint: int = 0, members: list[int] | None = None,
                  members_version: int = 0) -> tuple[View, list[ControlAction]]:
        st = self.state
        out: list[ControlAction] = []
        slot = st.slots.get(addr)
        if slot is None:
            slot = st.slots[addr] = 1 + max(st.slots.values(), default=0)
            self.brokers[slot] = Broker(slot, addr)
            out.append(self._save())
        b = self.brokers[slot]
        b.heard_at, b.max_offset = now, max_offset
        b.epoch = max(b.epoch, epoch)
        if st.master is None and st.promoting is None and wants_master:
            st.master, st.epoch = slot, st.epoch + 1  # the group's first master
            b.epoch = st.epoch
            out.append(self._save())
        if st.master == slot and epoch == st.epoch and st.promoting is None:
            newer = members is not None and members_version >= st.members_version and (
                members_version > st.members_version or sorted(members) != st.members)
            if checkpoint > st.checkpoint or newer:
                st.checkpoint = max(st.checkpoint, checkpoint)
                if newer:
                    assert members is not None  # (newer says so)
                    st.members, st.members_version = sorted(members), members_version
                out.append(self._save())
                out += self._drop_covered()
        return self.view(slot), out

    def view(self, slot: int) -> View:
        st = self.state
        b = self.brokers[slot]
        if st.master is None or st.promoting is not None:
            role = "WAIT"
        else:
            role = "MASTER" if st.master == slot else "SLAVE"
        master_addr = self.brokers[st.master].addr if st.master is not None else None
        later = [t for e, t in st.takeovers if e > b.epoch]
        truncate = min(later) if later and role == "SLAVE" and self.bug != "no-rollback" \
            else None
        return View(st.epoch, role, slot, master_addr, st.checkpoint,
                    tuple((s, st.checkpoint) for s in st.members), truncate,
                    st.members_version)

    # ---- the cache ----------------------------------------------------------------
    def cache_message(self, epoch: int, offset: int, end: int, msg_id: str, data: bytes
                      ) -> tuple[bool, list[ControlAction]]:
        """S3-3: the master's sync timed out; keep the message if we can."""
        st = self.state
        if epoch != st.epoch or st.promoting is not None or st.master is None:
            return False, []  # a deposed master, or a failover under way
        if end <= st.checkpoint:
            return True, []  # already safe
        if self.cache_bytes + len(data) > self.config.max_cache_bytes:
            return False, []
        entry = Cached(offset, end, msg_id, bytes(data))
        if self.cache and offset < self.cache[-1].offset:
            if any(c.offset == offset for c in self.cache):
                return True, []
            self.cache.append(entry)
            self.cache.sort(key=lambda c: c.offset)
        else:
            self.cache.append(entry)
        self.cache_bytes += len(entry.data)
        return True, [SaveCache(entry)]

    def _drop_covered(self) -> list[ControlAction]:
        cp = self.state.checkpoint
        keep = [c for c in self.cache if c.end > cp]
        if len(keep) == len(self.cache):
            return []
        self.cache = keep
        self.cache_bytes = sum(len(c.data) for c in keep)
        return [SaveCache(None)]

    # ---- failover -----------------------------------------------------------------
    def tick(self, now: int) -> list[ControlAction]:
        st = self.state
        timeout = self.config.master_timeout_ms
        if st.promoting is not None:
            b = self.brokers[st.promoting]
            if b.heard_at >= self.started_at and b.max_offset < st.checkpoint:
                # back with a log shorter than when it was chosen: restarted on a replaced
                # disk, so nothing of a promotion it may have begun is left: choose again
                st.promoting = None
                return [self._save()]
            # otherwise never abandoned (the old master could serve again, and the chosen
            # broker, back, take over without what it wrote): asked again until it answers
            if now - self._promote_sent < timeout:
                return []
            self._promote_sent = now
            return [self._promote(self.brokers[st.promoting])]
        if st.master is None or now - self.started_at < timeout:
            return []
        master = self.brokers[st.master]  # (heard since this control node started)
        if now - master.heard_at < timeout and master.max_offset >= st.checkpoint:
            return []  # (a master whose log ends below the checkpoint lost its copy)
        successor = self._successor(now)
        return [] if successor is None else self._fail_over(successor, now)

    def _successor(self, now: int, preferred: int | None = None) -> Broker | None:
        """The slave to promote: `preferred` if it may be, else the live member with the
        longest log; None when no slave holds the checkpoint (wait for the master, or one,
        to return). A member is eligible only once it follows this epoch's master: then its
        log holds nothing past an earlier takeover that the current lineage does not."""
        st = self.state
        live = [self.brokers[s] for s in st.members
                if s in self.brokers and s != st.master and self.brokers[s].epoch == st.epoch
                and now - self.brokers[s].heard_at < self.config.master_timeout_ms
                and self.brokers[s].max_offset >= st.checkpoint]
        for b in live:
            if b.slot == preferred:
                return b
        return max(live, key=lambda b: (b.max_offset, -b.slot), default=None)

    def _fail_over(self, successor: Broker, now: int) -> list[ControlAction]:
        self.state.promoting = successor.slot
        self._promote_sent = now
        return [self._save(), self._promote(successor)]

    def hand_over(self, addr: str, epoch: int, now: int, preferred: int | None = None
                  ) -> tuple[str | None, list[ControlAction]]:
        """The master of `epoch` gives the group up (its clients cannot reach it): a
        failover now, as if its heartbeats had stopped, to `preferred` if that member may
        take over. Why not, or None and what to do."""
        st = self.state
        slot = st.slots.get(addr)
        if slot is None or slot != st.master or epoch != st.epoch:
            return f"{addr} is not the master in epoch {epoch} (the group is in {st.epoch})", []
        if st.promoting is not None:
            return "a failover is under way", []
        successor = self._successor(now, preferred)
        if successor is None:
            return "no live slave holds the checkpoint", []
        out = self._fail_over(successor, now)
        if self.bug == "hand-over-skips-cache":
            out = [dataclasses.replace(a, replay=()) if isinstance(a, Promote) else a
                   for a in out]
        return None, out

    def _promote(self, b: Broker) -> Promote:
        st = self.state
        # acks from the old master's stream count only up to the checkpoint in the new one
        members = tuple((s, st.checkpoint) for s in st.members if s not in (b.slot, st.master))
        replay = () if self.bug == "failover-skips-cache" else tuple(self.cache)
        return Promote(b.addr, b.slot, st.epoch + 1, replay, st.checkpoint, members)

    def promoted(self, slot: int, epoch: int, takeover: int,
                 replayed: list[tuple[int, int, int]], log_end: int) -> list[ControlAction]:
        """The new master answered: its log ended at `takeover` and each replayed cached
        entry (old offset -> new offset, new end) now lives in its log."""
        st = self.state
        if st.promoting != slot or epoch != st.epoch + 1:
            return []
        old = st.master
        st.epoch, st.master, st.promoting = epoch, slot, None
        st.takeovers.append((epoch, takeover))
        st.members = [s for s in st.members if s not in (slot, old)]
        st.members_version = 0  # the new master's own proposals come next
        self.brokers[slot].epoch = epoch
        moved = {o: (no, ne) for o, no, ne in replayed}
        for c in self.cache:
            if c.offset in moved:  # a batch straddling T was replayed from T on
                c.data = c.tail(takeover)
                c.offset, c.end = moved[c.offset]
                st.replayed.append(c.msg_id)
        del st.replayed[:-REPLAYED_KEPT]
        self.cache = [c for c in self.cache if c.end <= takeover or c.offset >= takeover]
        self.cache.sort(key=lambda c: c.offset)
        return [self._save(), SaveCache(None)]

    # ---- PENDING ------------------------------------------------------------------
    def resolve(self, epoch: int, end: int, msg_id: str = "") -> Resolution:
        """S3-4 for a PENDING send made in `epoch` whose bytes ended at `end`."""
        st = self.state
        if msg_id and (msg_id in st.replayed or any(c.msg_id == msg_id for c in self.cache)):
            return Resolution.DONE  # we did keep it (our answer to the master was lost)
        later = [t for e, t in st.takeovers if e > epoch]
        if later:
            if end > min(later):
                return Resolution.RESEND  # past a takeover: that region was replaced
        # still at its offset in the current master's log: done once the checkpoint
        # covers it (before that, a failover could still lose it)
        return Resolution.DONE if end <= st.checkpoint else Resolution.UNKNOWN

    def status(self) -> dict[str, Any]:
        st = self.state.to_json()
        st["brokers"] = {b.addr: {"slot": b.slot, "maxOffset": b.max_offset, "epoch": b.epoch}
                         for b in self.brokers.values()}
        st["cached"] = len(self.cache)
        st["cachedBytes"] = self.cache_bytes
        return st
