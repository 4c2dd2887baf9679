"""A 3-node controller group (S1) in the simulator: real ControllerNode objects (Raft +
the metadata state machine), a faulty network, controller crashes and restarts from
their disks, brokers whose heartbeats come and go, masters altering their SyncStateSet,
operators electing masters. The checker watches every applied command:

- applied-agreement: every node applies the same command at the same log index;
- epoch-monotonic: MasterEpoch strictly increases with each new master;
- one-master-per-epoch: at most one master per broker group per epoch;
- elect-from-sync-set: a new master comes from the SyncStateSet (unclean elections off);
- liveness: after the faults heal, a group whose master died gets a new one.
"""
from __future__ import annotations

from typing import ClassVar

from ..controller import (
    BUGS, AlterSyncStateSet, Answer, Applied, ControllerNode, ElectMaster, RegisterBroker,
    encode_command,
)
from ..replication.raft import RaftConfig, Send
from .disk import RaftDisk
from .events import CLIENT, FAULT, HEAL, Client, Deliver, Fault, Heal, Restart, Tick
from .harness import LIVENESS, Simulation
from .result import Violation

TICK_MS = 20
GROUP, BROKERS = "g", (1, 2, 3)
NOT_ACTIVE_MS = 600  # the controller's brokerNotActiveTimeoutMillis


class ControllerSim(Simulation):
    BUGS = BUGS
    INVARIANTS: ClassVar[dict[str, str]] = {
        "applied-agreement": "every controller applies the same command at an index",
        "epoch-monotonic": "MasterEpoch strictly increases with each new master",
        "one-master-per-epoch": "at most one master per broker group per epoch",
        "elect-from-sync-set": "a new master comes from the SyncStateSet",
        LIVENESS: "after every fault heals, a dead master's SyncStateSet takes over",
    }

    def __init__(self, seed: int, *, steps: int = 6000, bugs=frozenset(),
                 trace_events: bool = False):
        super().__init__(seed, steps=steps, bugs=bugs, trace_events=trace_events)
        self.ids = ["c0", "c1", "c2"]
        self.cfg = RaftConfig(election_timeout_ms=300, heartbeat_ms=60,
                              max_push_timeout_ms=200, quorum_ack_timeout_ms=1500)
        self.disks = {i: RaftDisk() for i in self.ids}
        self.nodes: dict[str, ControllerNode | None] = {}
        self.bug = self.bug_in(BUGS)
        self.alive_brokers = set(BROKERS)
        self.applied: dict[int, bytes] = {}  # log index -> command, as first applied
        self.masters: dict[int, int] = {}  # master epoch -> master
        self.last_epoch = 0
        self.next_rid = 1
        self.elections = 0
        self._ticks = {i: Tick(i) for i in self.ids}

    def start(self) -> None:
        self.boot_all(self._start, self._ticks, TICK_MS)

    def _start(self, node_id: str) -> None:
        d = self.disks[node_id]
        self.nodes[node_id] = ControllerNode(
            node_id, self.ids, self.cfg, log=list(d.log), term=d.term, voted_for=d.voted_for,
            commit=d.commit, rng=self.rng, now=self.w.now, heartbeat_timeout_ms=NOT_ACTIVE_MS,
            bug=self.bug)

    def _execute(self, node_id: str, actions: list) -> None:
        self.disks[node_id].carry_out(actions, self._act, node_id)

    def _act(self, node_id: str, a) -> None:
        if isinstance(a, Send):
            self.w.send(node_id, a.msg.dst, a.msg)
        elif isinstance(a, Applied):
            self._check(node_id, a)
        elif isinstance(a, Answer):
            self._answered(node_id, a)

    def _answered(self, node_id: str, a: Answer) -> None:
        """A proposal's outcome (the broker-side simulation routes it back)."""

    # ---- the checker ------------------------------------------------------------------
    def _check(self, node_id: str, a: Applied) -> None:
        data = encode_command(a.command)
        first = self.applied.setdefault(a.index, data)
        if first != data:
            raise Violation("applied-agreement", f"{node_id} applied {a.command} at "
                            f"{a.index}, others applied {first!r} there")
        if not isinstance(a.command, ElectMaster) or not a.result.ok:
            return
        d = a.result.data
        epoch, master = d["masterEpoch"], d["masterBrokerId"]
        other = self.masters.setdefault(epoch, master)
        if other != master:
            raise Violation("one-master-per-epoch", f"two masters in epoch {epoch}: {other} "
                            f"and {master}")
        was, before = d["previousSyncStateSet"], d["previousMaster"]
        if before is not None and master != before and (d.get("unclean") or master not in was):
            raise Violation("elect-from-sync-set", f"{master} elected outside the "
                            f"SyncStateSet {was} with unclean elections off")
        if first is data:  # the first application of this index, anywhere
            if epoch > self.last_epoch:
                self.last_epoch = epoch
                self.elections += 1
            elif epoch < self.last_epoch and a.result.error == "":
                raise Violation("epoch-monotonic", f"master epoch went back from "
                                f"{self.last_epoch} to {epoch}")

    # ---- the world --------------------------------------------------------------------
    def _leader(self) -> ControllerNode | None:
        for n in self.nodes.values():
            if n is not None and n.is_leader:
                return n
        return None

    def _group(self):
        leader = self._leader()
        return leader.metadata.groups.get(GROUP) if leader is not None else None

    def _propose(self, cmd) -> None:
        leader = self._leader()
        if leader is not None:
            rid = self.next_rid
            self.next_rid += 1
            self._execute(leader.raft.id, leader.propose(rid, cmd, self.w.now))

    def on_tick(self, ev: Tick) -> None:
        node = self.nodes.get(ev.node)
        if node is not None:
            for b in self.alive_brokers:  # brokers heartbeat every controller
                node.broker_heartbeat(GROUP, b, self.w.now)
            self._execute(ev.node, node.tick(self.w.now))
        self.w.at(TICK_MS, ev)

    def on_deliver(self, ev: Deliver) -> None:
        node = self.nodes.get(ev.dst)
        if node is not None:
            self._execute(ev.dst, node.step(ev.msg, self.w.now))

    def on_client(self, _: Client) -> None:
        """Operators and masters: register brokers, elect, shrink or expand the set."""
        rng = self.rng
        g = self._group()
        r = rng.random()
        if g is None or r < 0.1:
            self._propose(RegisterBroker("c", GROUP, f"b:{rng.choice(BROKERS)}"))
        elif g.master is None or r < 0.2:
            self._propose(ElectMaster(GROUP, tuple(sorted(self.alive_brokers)), operator=True))
        elif r < 0.7:
            members = {g.master} | {b for b in BROKERS if rng.random() < 0.6}
            self._propose(AlterSyncStateSet(GROUP, g.master, g.master_epoch,
                                            tuple(sorted(members)), g.set_epoch))
        self.w.at(rng.randint(20, 200), CLIENT)

    def on_fault(self, _: Fault) -> None:
        if not self.faulting:
            return
        w, rng = self.w, self.rng
        r = rng.random()
        if r < 0.3:
            self._crash_controller(rng.choice(self.ids))
        elif r < 0.5:
            self._cut_off(rng.choice(self.ids), set(self.ids))
        else:  # a broker dies or comes back
            b = rng.choice(BROKERS)
            self.alive_brokers ^= {b}
            w.log(f"broker {b} {'up' if b in self.alive_brokers else 'down'}")
        w.at(rng.randint(100, 600), FAULT)

    def _crash_controller(self, victim: str) -> None:
        if self.nodes.get(victim) is not None:
            self.nodes[victim] = None
            self.w.log(f"{victim} crashed")
            self.w.at(self.rng.randint(100, 1500), Restart(victim))

    def _cut_off(self, victim: str, everyone: set[str]) -> None:
        self.w.partition([{victim}, everyone - {victim}])
        self.w.at(self.rng.randint(100, 1200), HEAL)

    def on_restart(self, ev: Restart) -> None:
        # (no alive check: a restart left over from a crash that recover() already undid
        # restarts a live controller from its disk, a harmless extra crash)
        self._start(ev.node)
        self.w.log(f"{ev.node} restarted")

    def on_heal(self, _: Heal) -> None:
        self.w.net.heal()

    # ---- settling ---------------------------------------------------------------------
    def recover(self) -> None:
        for i in self.ids:
            if self.nodes.get(i) is None:
                self._start(i)

    def check_liveness(self) -> None:
        """Every broker comes back but the master: a member of its set must take over."""
        self.wait_for(lambda: (g := self._group()) is not None and g.master is not None)
        leader = self._leader()
        if leader is None or GROUP not in leader.metadata.groups:
            return  # the group never formed in this run: nothing to fail over
        g = leader.metadata.groups[GROUP]
        if g.master is None:
            raise Violation(LIVENESS, "after every fault healed, the group has no master")
        dead, epoch = g.master, g.master_epoch
        self.alive_brokers = set(BROKERS) - {dead}

        def moved() -> bool:
            gg = self._group()
            return gg is not None and gg.master != dead and gg.master_epoch > epoch
        took_over = self.wait_for(moved)
        in_set = set(g.sync_state_set) - {dead}
        if in_set and not took_over:
            raise Violation(LIVENESS, f"master {dead} died and no member of "
                            f"{sorted(in_set)} took over within 10 s")

    def stats(self) -> dict:
        return {"elections": self.elections, "applied": len(self.applied),
                "last_epoch": self.last_epoch}
