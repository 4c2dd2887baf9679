"""The consistent checkpoint and control node scheme (S3) in the simulator: three brokers
running HAMaster / HASlave with the checkpoint on and a CheckpointReplica each, and a
GroupControl (the control node) that crashes and restarts from what it saved, and whose
master at times gives the group up (its clients cannot reach it: a failover it asks for). Producers
send throughout; a sync that times out is cached on the control node, and a send left
PENDING is resolved by asking the control node (S3-4). See `ha_group` for the group.

Disks: a broker's crash keeps only the flushed part of its log. Brokers flush by group
commit (one flush at a time, 1-5 ms or, on a slow disk, 5-40 ms); a slave reports only
what it flushed, and a master sends its slaves only what it flushed, so the checkpoint
(the minimum over the members' reports) never counts a byte any copy could still lose.
The master's checkpoint file is written in the background too, and counted once saved.

Permanent losses: a crashed broker may never come back (once per run), or come back on
an empty disk (its log, role and checkpoint files gone; not the master's, and one at a
time): the master drops such a member (`replication/ha/members`) and the group goes on.

Invariants, besides the group's:
- checkpoint-within-members: a master's consistent checkpoint never exceeds what it or
  any member slave holds of its lineage on disk, flushed (so a crash of any copy keeps
  everything it covers; checked as it advances and when a member crashes; a replaced
  disk is exempt until it holds it again);
- members-saved-hold-checkpoint: neither does it exceed what any member the control node
  saved holds on disk (it promotes only those), so a member is dropped only once that is
  saved;
- acked-on-new-master: every acknowledged send (including those only the control node
  cached) and every PENDING one resolved DONE is in a new master's log;
- resend-not-on-master: a PENDING send resolved RESEND is not in the current master's log
  (resending it would duplicate it);
- liveness, also: once faults heal (a lost broker stays lost), a new send is covered by
  the consistent checkpoint itself, not only by the control node's cache, within 10 s.
"""
from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from typing import ClassVar

from ..replication.checkpoint import BUGS as CONTROL_BUGS
from ..replication.checkpoint import (
    AnswerPromotion, Cached, CheckpointReplica, ControlConfig, Follow, GroupControl, GroupState,
    Lead, Promote, Replay, Resolution, SaveCache, SaveRole, SaveState, Stand, Truncate, View,
    lead_start,
)
from ..replication.ha import BUGS as HA_BUGS
from ..replication.ha import SLAVE_BUGS, Complete, SaveCheckpoint, SyncStatus
from ..replication.ha.members import BUGS as MEMBER_BUGS
from .checkpoint_wire import (
    BrokerBeat, CacheAnswer, CacheMessage, CheckpointSaved, HandOverAsk, Promoted, Resolve,
    ResolveAsk, Resolved,
)
from .disk import SimLog
from .events import Beat, LinkDeliver, Restart, Tick
from .ha_group import TICK_MS, HAGroupSim, Node, Sent
from .result import Violation

CTL, CLIENT = "ctl", "client"  # the control node's and the producers' network names
HEARTBEAT_MS = 100  # broker -> control node
RESOLVE_MS = 50  # how soon a producer asks (again) about a PENDING send
# the broker drivers' part, played by this simulator's own driver code
DRIVER_BUGS = {"master-pushes-unflushed": "the master sends its slaves, and so lets the "
                                          "checkpoint count, log bytes it has not flushed"}
BUGS = {"checkpoint-max": HA_BUGS["checkpoint-max"], **MEMBER_BUGS, **SLAVE_BUGS,
        **CONTROL_BUGS, **DRIVER_BUGS}
MEMBER_TIMEOUT_MS = 1000  # checkpointMemberTimeout
LOSE_SHARE, WIPE_SHARE = 0.08, 0.12  # of crashes: never back; back on an empty disk
HAND_OVER_SHARE = 0.4  # of control-plane faults: the master gives the group up instead


def _copy_cache(cache: list[Cached]) -> list[Cached]:
    """What the control node's disk holds of its cache: entries the live one cannot change."""
    return [Cached(c.offset, c.end, c.msg_id, c.data) for c in cache]


@dataclass
class CheckpointNode(Node):
    """A broker; its crash keeps its log, its saved role and its saved checkpoint."""
    replica: CheckpointReplica | None = None
    saved_role: tuple = (0, None)  # (epoch, unanswered promotion)
    saved_checkpoint: tuple = (-1, 0, ())  # (epoch, checkpoint, members)
    saving: tuple | None = None  # the checkpoint file write under way (one at a time)
    save_wanted: tuple | None = None  # the newest checkpoint waiting to be written
    lead_epoch: int = 0
    slot: int = 0
    wipe_on_restart: bool = False
    wiped: bool = False  # its disk was replaced and it does not hold the checkpoint again


class CheckpointSim(HAGroupSim):
    BUGS = BUGS
    CHECKPOINT = True
    LOSES_UNFLUSHED = True
    INVARIANTS: ClassVar[dict[str, str]] = {
        **HAGroupSim.INVARIANTS,
        "checkpoint-within-members": "a master's checkpoint never exceeds what it or a "
                                     "member slave holds on disk of its lineage: an "
                                     "acknowledgement means on disk on every copy",
        "acked-on-new-master": "a new master holds every acknowledged send and every "
                               "PENDING one resolved DONE",
        "resend-not-on-master": "a send resolved RESEND is not in the current master's log",
        "members-saved-hold-checkpoint": "a master's checkpoint never exceeds what a member "
                                         "the control node saved holds",
    }

    def __init__(self, seed: int, *, steps: int = 20_000, bugs=frozenset(),
                 replicas: int | None = None, trace_events: bool = False):
        super().__init__(seed, steps=steps, bugs=bugs, replicas=replicas,
                         trace_events=trace_events)
        self.ctl_bug = self.bug_in(CONTROL_BUGS)
        self.ctl_config = ControlConfig(master_timeout_ms=300)
        self.ctl: GroupControl | None = None
        self.ctl_alive = True
        self.ctl_saved: tuple[dict | None, list] = (None, [])  # what its crash keeps
        self.promotions = 0
        self.ha_config = dataclasses.replace(self.ha_config, member_timeout_ms=MEMBER_TIMEOUT_MS)
        self.loss_rng = random.Random(seed * 7919 + 1)  # (the main stream stays as it was)
        self.hand_rng = random.Random(seed * 7919 + 2)  # (and so here)
        self.hand_overs = 0  # failovers a master asked for
        self.lost: str | None = None  # the broker that never comes back
        self.wipes = self.drops = self.covered = self.stalled = 0
        self._beats = {name: Beat(name) for name in self.names}
        self._ctl_tick = Tick(CTL)

    def _group_size(self) -> int:
        return 3

    def _new_node(self, name: str) -> Node:
        return CheckpointNode(name)

    # ---- roles: the control node decides ----------------------------------------------
    def _start_roles(self) -> None:
        self.ctl = GroupControl(self.ctl_config, self.w.now, bug=self.ctl_bug)
        self.w.at(0, self._ctl_tick)
        for name in self.names:
            self.nodes[name].replica = CheckpointReplica()
            self.w.at(self.rng.randint(0, 50), self._beats[name])

    def _rejoin(self, node: CheckpointNode) -> None:
        node.replica = CheckpointReplica(*node.saved_role)  # it asks the control node
        self.w.at(1, self._beats[node.name])

    def _lead_epoch(self, node: CheckpointNode, a: Lead) -> None:
        saved_epoch, saved_cp, saved_members = node.saved_checkpoint
        checkpoint, members = lead_start(a, (saved_epoch, saved_cp, dict(saved_members)))
        node.saving = node.save_wanted = None  # (the broker finishes them before it leads)
        node.saved_checkpoint = (a.epoch, checkpoint, tuple(members.items()))
        node.lead_epoch = a.epoch
        self._lead(node.name, checkpoint, tuple(members.items()))

    def _pushable(self, node: Node) -> int:
        """Only what the master flushed: a slave never holds bytes a crash of the master
        can lose (the restarted master would write other messages at those offsets)."""
        if "master-pushes-unflushed" in self.bugs:
            return node.log.end
        return node.log.flushed

    def _can_write(self, node: CheckpointNode) -> bool:
        return node.replica.role == "MASTER"

    def _epoch(self, node: CheckpointNode) -> int:
        return node.replica.epoch

    def _save_checkpoint(self, node: CheckpointNode, a: SaveCheckpoint) -> None:
        """Written (and fsynced) in the background, one write at a time; the master
        publishes and counts the checkpoint once it is durable."""
        self._check_checkpoint(node, a.checkpoint)
        node.save_wanted = (node.lead_epoch, a.checkpoint, a.members)
        self._save_next(node)

    def _save_next(self, node: CheckpointNode) -> None:
        if node.saving is None and node.save_wanted is not None:
            node.saving, node.save_wanted = node.save_wanted, None
            self.w.at(self.rng.randint(*self.flush_ms),
                      CheckpointSaved(node.name, node.incarnation))

    def on_checkpoint_saved(self, ev: CheckpointSaved) -> None:
        node = self.nodes[ev.node]
        if not node.alive or ev.incarnation != node.incarnation or node.saving is None:
            return  # crashed meanwhile (the write is lost), or a new role dropped it
        saved, node.saving = node.saving, None
        node.saved_checkpoint = saved
        if node.master is not None and node.lead_epoch == saved[0]:
            self._run_master(node, node.master.checkpoint_saved(saved[1], self.w.now))
        self._save_next(node)

    def _timed_out(self, node: Node, s: Sent) -> None:
        self.net_links.send(node.name, CTL, CacheMessage(
            node.name, s.epoch, s.offset, s.end, s.number, node.log.read(s.offset, s.end)))

    # ---- the brokers' side of the control node ------------------------------------------
    def on_beat(self, ev: Beat) -> None:
        node = self.nodes[ev.node]
        if not node.alive:
            return  # its restart beats again
        m = node.master
        version, members = m.proposal() if m else (0, None)
        self.net_links.send(node.name, CTL, BrokerBeat(
            node.name, node.name == self.names[0], node.replica.epoch, node.log.end,
            m.saved if m else 0, members, version))
        self.w.at(HEARTBEAT_MS, ev)

    def _run_replica(self, node: CheckpointNode, actions: list) -> None:
        for a in actions:
            if isinstance(a, Stand):
                self._step_down(node)
                self._unfollow(node)
            elif isinstance(a, Truncate):
                self.w.log(f"{node.name} truncates {node.log.end} -> {a.offset}")
                node.log.truncate(a.offset)
            elif isinstance(a, SaveRole):
                node.saved_role = (a.epoch, a.promotion)
            elif isinstance(a, Follow):
                node.slot = a.slot
                self._follow(node.name, a.master_addr)
            elif isinstance(a, Lead):
                node.slot = a.slot
                self._lead_epoch(node, a)
                self._check_new_master(node)
            elif isinstance(a, Replay):
                self._replay(node, a)
            elif isinstance(a, AnswerPromotion):
                p = a.promotion
                self.net_links.send(node.name, CTL, Promoted(
                    node.name, node.slot, p.epoch, p.takeover, tuple(p.replayed), p.log_end))

    def _replay(self, node: CheckpointNode, a: Replay) -> None:
        """S3-5: the new master appends the cached messages past where it took over."""
        moved = []
        for c in a.promote.replay:
            if c.end > a.takeover:
                off, end = node.log.append(*SimLog.split_record(c.data))
                moved.append((c.offset, off, end))
        node.log.flush()  # (the broker fsyncs the replayed messages before it answers)
        self.w.log(f"{node.name} took over at {a.takeover}, replayed {len(moved)}")
        self._run_replica(node, node.replica.replayed(moved, node.log.end))

    def _on_message(self, node: CheckpointNode, msg) -> None:
        if isinstance(msg, View):
            self._run_replica(node, node.replica.on_view(msg, node.log.end))
            m = node.master
            if m is not None and msg.role == "MASTER" and msg.epoch == node.lead_epoch:
                before = len(m.members)
                self._run_master(node, m.members_saved(
                    msg.members_version, [s for s, _ in msg.members], self.w.now))
                self.drops += before - len(m.members)
        elif isinstance(msg, Promote):
            self._run_replica(node, node.replica.on_promote(msg, node.log.end))
        elif isinstance(msg, CacheAnswer):
            s = self.sent[msg.number]
            if msg.ok:
                self._acked(node, s)
            else:
                self._set_status(s, "PENDING")
                self.w.at(RESOLVE_MS, Resolve(s.number))

    # ---- the control node -------------------------------------------------------------
    def _on_outside(self, ev: LinkDeliver) -> None:
        if ev.dst == CLIENT:
            self._resolved(ev.msg.number, ev.msg.resolution)
        elif self.ctl_alive:
            self._on_ctl(ev.msg)

    def _on_ctl(self, msg) -> None:
        ctl, send = self.ctl, self.net_links.send
        if isinstance(msg, BrokerBeat):
            view, actions = ctl.heartbeat(
                msg.name, msg.wants_master, msg.epoch, msg.log_end, self.w.now,
                msg.checkpoint, None if msg.members is None else list(msg.members),
                msg.members_version)
            self._run_ctl(actions)
            send(CTL, msg.name, view)
        elif isinstance(msg, CacheMessage):
            ok, actions = ctl.cache_message(msg.epoch, msg.offset, msg.end, str(msg.number),
                                            msg.data)
            self._run_ctl(actions)
            send(CTL, msg.name, CacheAnswer(msg.number, ok))
        elif isinstance(msg, Promoted):
            self._run_ctl(ctl.promoted(msg.slot, msg.epoch, msg.takeover, list(msg.moved),
                                       msg.log_end))
            if ctl.state.master == msg.slot:
                self.promotions += 1
                send(CTL, msg.name, ctl.view(msg.slot))
        elif isinstance(msg, HandOverAsk):
            why, actions = ctl.hand_over(msg.name, msg.epoch, self.w.now, msg.prefer)
            self._run_ctl(actions)
            self.hand_overs += why is None
            self.w.log(f"ctl: {msg.name}'s hand-over: {why or 'failing over'}")
        elif isinstance(msg, ResolveAsk):
            send(CTL, CLIENT, Resolved(msg.number,
                                       ctl.resolve(msg.epoch, msg.end, str(msg.number))))

    def _run_ctl(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, SaveState):  # written as JSON: the copy shares nothing
                self.ctl_saved = (json.loads(json.dumps(a.state)), self.ctl_saved[1])
            elif isinstance(a, SaveCache):
                self.ctl_saved = (self.ctl_saved[0], _copy_cache(self.ctl.cache))
            elif isinstance(a, Promote):
                self.w.log(f"ctl promotes {a.addr} to epoch {a.epoch}")
                self.net_links.send(CTL, a.addr, a)

    def on_tick(self, ev: Tick) -> None:
        if ev.node != CTL:
            super().on_tick(ev)
            return
        if self.ctl_alive:
            self._run_ctl(self.ctl.tick(self.w.now))
        self.w.at(TICK_MS, ev)

    def on_restart(self, ev: Restart) -> None:
        if ev.node != CTL:
            node = self.nodes[ev.node]
            if ev.node == self.lost or node.alive:
                return  # lost for good
            if node.wipe_on_restart:
                self.w.log(f"{node.name} comes back on an empty disk")
                node.log, node.saved_role, node.saved_checkpoint = SimLog(), (0, None), \
                    (-1, 0, ())
                node.wipe_on_restart, node.wiped = False, True
                self.wipes += 1
            super().on_restart(ev)
            return
        # (no alive check: a restart left over from a crash healed by recover() restarts a
        # live control node, which then only rereads what it saved)
        state, cache = self.ctl_saved
        self.ctl = GroupControl(self.ctl_config, self.w.now,
                                GroupState.from_json(state) if state else None,
                                _copy_cache(cache), bug=self.ctl_bug)
        self.ctl_alive = True
        self.w.log("control node restarted")

    def _crash(self, name: str) -> None:
        node = self.nodes[name]
        node.saving = node.save_wanted = None  # an unfinished file write is lost
        super()._crash(name)
        # a member's crash keeps what it flushed: the checkpoint must still be within it
        master = self._current_master()
        if master is not None and master.alive and master.master is not None \
                and master.lead_epoch == self.ctl.state.epoch:
            self._check_checkpoint(master, master.master.checkpoint)

    def _fault_control_plane(self) -> bool:
        master = self._current_master()
        if self.hand_rng.random() < HAND_OVER_SHARE and master is not None and master.alive \
                and master.replica.role == "MASTER":
            # its clients cannot reach it (client_handover.py): it asks for a failover now,
            # naming a slave (any: the control node decides whether it may take over), and
            # goes on as master until a view says otherwise
            prefer = self.hand_rng.choice([n.slot for n in self.nodes.values()])
            self.w.log(f"{master.name} gives the group up, preferring slot {prefer}")
            self.net_links.send(master.name, CTL, HandOverAsk(
                master.name, master.replica.epoch, prefer))
            return True
        if not self.ctl_alive:
            return False
        self.ctl_alive = False
        self.w.log("control node crashed")
        self.w.at(self.rng.randint(100, 1000), Restart(CTL))
        return True

    def _restart_later(self, name: str) -> None:
        """Most crashed brokers come back; one may not, some on an empty disk: one lost
        copy at a time, never the master's (the control node holds its cache, not its log),
        nor that of the broker being promoted: it may have taken over and answered before
        it crashed, and is then the master, possibly of no member but itself. A replaced
        disk loses a copy as a lost broker does, so only where `_may_lose` allows one."""
        roll = self.loss_rng.random()
        one_at_a_time = self.lost is None and not any(n.wiped or n.wipe_on_restart
                                                      for n in self.nodes.values())
        if one_at_a_time and roll < LOSE_SHARE and self._may_lose(name):
            self.lost = name
            self.w.log(f"{name} is lost for good")
            return
        st = self.ctl.state
        slot = st.slots.get(name)
        if one_at_a_time and roll < LOSE_SHARE + WIPE_SHARE and \
                slot not in (st.master, st.promoting) and self._may_lose(name):
            self.nodes[name].wipe_on_restart = True
        super()._restart_later(name)

    def _may_lose(self, name: str) -> bool:
        """Failover waits for a master that no slave holds the checkpoint of, and for the
        broker it promotes: neither is lost for good, nor a member while the master is
        down (the control node could choose it before it noticed: see _waits_for_lost)."""
        saved, slot = self.ctl_saved[0], self.nodes[name].slot
        if saved is None or saved["promoting"] is not None:
            return saved is None or saved["promoting"] != slot
        master = self._current_master()
        if saved["master"] == slot:
            return any(s != slot for s in saved["members"])
        return (master is not None and master.alive) or slot not in saved["members"]

    def _victim(self, name: str) -> str:
        master = self._current_master() if self.rng.random() < 0.5 else None
        return master.name if master is not None else name  # masters are the best victims

    def _partition_targets(self) -> list[str]:
        return self.names + [CTL]

    # ---- producers: PENDING sends ------------------------------------------------------
    def on_resolve(self, ev: Resolve) -> None:
        s = self.sent[ev.number]
        self.net_links.send(CLIENT, CTL, ResolveAsk(s.number, s.epoch, s.end))

    def _resolved(self, number: int, res: Resolution) -> None:
        s = self.sent[number]
        if s.status != "PENDING":
            return
        if res is Resolution.UNKNOWN:
            self.w.at(RESOLVE_MS, Resolve(number))
            return
        self._set_status(s, res.value)
        if res is Resolution.RESEND:
            master = self._current_master()
            if master is not None and number in master.log.messages():
                raise Violation("resend-not-on-master", f"message {number} resolved RESEND "
                                f"but the master {master.name} holds it")

    def _current_master(self) -> CheckpointNode | None:
        st = self.ctl.state if self.ctl else None
        if st is None or st.master is None:
            return None
        name = next((a for a, s in st.slots.items() if s == st.master), None)
        return self.nodes.get(name)

    # ---- checks -----------------------------------------------------------------------
    def _check_checkpoint(self, master: CheckpointNode, checkpoint: int) -> None:
        if master.log.flushed < checkpoint:  # held means on disk: what a crash keeps
            raise Violation("checkpoint-within-members", f"checkpoint {checkpoint} of "
                            f"{master.name} counts bytes it has not flushed (flushed "
                            f"{master.log.flushed}, log end {master.log.end})")
        self._check_holders(master, checkpoint, master.master.members,
                            "checkpoint-within-members")
        saved = self.ctl_saved[0]  # what the control node would promote from, on its disk
        if saved and saved["epoch"] == master.lead_epoch and saved["master"] == master.slot:
            self._check_holders(master, checkpoint, saved["members"],
                                "members-saved-hold-checkpoint", " the control node saved")

    def _check_holders(self, master: CheckpointNode, checkpoint: int, slots, invariant: str,
                       whose: str = "") -> None:
        for sid in slots:
            holder = next((n for n in self.nodes.values() if n.slot == sid), None)
            if holder is None or holder is master:
                continue
            holds = holder.log.flushed >= checkpoint and \
                holder.log.data[:checkpoint] == master.log.data[:checkpoint]
            if holder.wiped:  # the fault took its copy: exempt until it holds it again
                holder.wiped = not holds
            elif not holds:
                raise Violation(invariant, f"checkpoint {checkpoint} of {master.name} "
                                f"exceeds what member{whose} {holder.name} holds on disk "
                                f"(flushed {holder.log.flushed}, log end {holder.log.end})")

    def _check_new_master(self, node: CheckpointNode) -> None:
        have = node.log.messages()
        for s in self.sent.values():
            if s.status in ("OK", "DONE") and s.number not in have:
                raise Violation("acked-on-new-master", f"new master {node.name} lacks message "
                                f"{s.number} ({s.status}, sent at [{s.offset}, {s.end}) "
                                f"epoch {s.epoch})")

    # ---- settling ---------------------------------------------------------------------
    def recover(self) -> None:
        super().recover()
        if not self.ctl_alive:
            self.on_restart(Restart(CTL))

    def _completed(self, node: CheckpointNode, a: Complete) -> None:
        if a.status is SyncStatus.OK:
            self.covered += 1  # the consistent checkpoint covered it (not the cache)
        super()._completed(node, a)

    def _waits_for_lost(self) -> bool:
        """Failover waits for the broker the control node chose: if that one is lost for
        good (chosen just as it was lost, before the control node could notice), the group
        stalls by design (docs/replication.md), and no progress can be demanded."""
        st = self.ctl.state
        return self.lost is not None and st.promoting == self.nodes[self.lost].slot

    def check_liveness(self) -> None:
        covered = self.covered
        if self._waits_for_lost():
            self.stalled = 1
            self.w.log(f"failover waits for {self.lost}, lost for good: no progress demanded")
            return
        super().check_liveness()
        self.expect(lambda: self.covered > covered, "after every fault healed (lost brokers "
                    f"stay lost: {self.lost}), no send was covered by the consistent "
                    "checkpoint within 10 s")
        master = self._writable_master()
        if master is not None:
            self._check_new_master(master)

    def stats(self) -> dict:
        return {"mode": "checkpoint", **super().stats(), "promotions": self.promotions,
                "lost": int(self.lost is not None), "wiped": self.wipes, "dropped": self.drops,
                "stalled": self.stalled, "hand_overs": self.hand_overs}
