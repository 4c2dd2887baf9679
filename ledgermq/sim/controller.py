"""A 3-node controller group (S1) in the simulator: real ControllerNode objects (Raft +
the metadata state machine), a faulty network, controller crashes and restarts from
their disks, brokers whose heartbeats come and go, masters altering their SyncStateSet,
operators electing masters. The checker watches every applied command:

- every node applies the same command at the same log index;
- MasterEpoch strictly increases with each new master;
- at most one master per broker group per epoch;
- a new master comes from the SyncStateSet (unclean elections are off here);
- after the faults heal, a group whose master died gets a new one.
"""
from __future__ import annotations

from ..controller import (
    BUGS, AlterSyncStateSet, Answer, Applied, ControllerNode, ElectMaster, RegisterBroker,
    encode_command,
)
from ..replication.raft import RaftConfig, Send
from ..replication.raft.types import PERSIST_ACTIONS
from .raft import Disk
from .world import SimResult, Violation, World

TICK_MS = 20
GROUP, BROKERS = "g", (1, 2, 3)


class ControllerSim:
    def __init__(self, seed: int, *, steps: int = 6000, bugs: frozenset[str] = frozenset()):
        self.w = World(seed)
        self.ids = ["c0", "c1", "c2"]
        self.cfg = RaftConfig(election_timeout_ms=300, heartbeat_ms=60,
                              max_push_timeout_ms=200, quorum_ack_timeout_ms=1500)
        self.disks = {i: Disk() for i in self.ids}
        self.nodes: dict[str, ControllerNode | None] = {}
        self.steps = steps
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        self.bug = next(iter(sorted(bugs)), None)
        self.alive_brokers = set(BROKERS)
        self.applied: dict[int, bytes] = {}  # log index -> command, as first applied
        self.masters: dict[int, int] = {}  # master epoch -> master
        self.last_epoch = 0
        self.next_rid = 1
        self.elections = 0

    def _start(self, node_id: str) -> None:
        d = self.disks[node_id]
        self.nodes[node_id] = ControllerNode(
            node_id, self.ids, self.cfg, log=list(d.log), term=d.term, voted_for=d.voted_for,
            commit=d.commit, rng=self.w.rng, now=self.w.now, heartbeat_timeout_ms=600,
            bug=self.bug)

    def _execute(self, node_id: str, actions: list) -> None:
        unsynced = []
        for a in actions:
            if isinstance(a, PERSIST_ACTIONS):
                unsynced.append(a)
                continue
            for u in unsynced:
                self.disks[node_id].apply(u)
            unsynced = []
            if isinstance(a, Send):
                self.w.send(node_id, a.msg.dst, a.msg)
            elif isinstance(a, Applied):
                self._check(node_id, a)
            elif isinstance(a, Answer):
                self._answered(node_id, a)
        for u in unsynced:
            self.disks[node_id].apply(u)

    def _answered(self, node_id: str, a: Answer) -> None:
        """A proposal's outcome (the broker-side simulation routes it back)."""

    # ---- the checker ------------------------------------------------------------------
    def _check(self, node_id: str, a: Applied) -> None:
        data = encode_command(a.command)
        first = self.applied.setdefault(a.index, data)
        if first != data:
            raise Violation(f"{node_id} applied {a.command} at {a.index}, others applied "
                            f"{first!r} there")
        if not isinstance(a.command, ElectMaster) or not a.result.ok:
            return
        d = a.result.data
        epoch, master = d["masterEpoch"], d["masterBrokerId"]
        other = self.masters.setdefault(epoch, master)
        if other != master:
            raise Violation(f"two masters in epoch {epoch}: {other} and {master}")
        was, before = d["previousSyncStateSet"], d["previousMaster"]
        if before is not None and master != before and (d.get("unclean") or master not in was):
            raise Violation(f"{master} elected outside the SyncStateSet {was} with unclean "
                            f"elections off")
        if first is data:  # the first application of this index, anywhere
            if epoch > self.last_epoch:
                self.last_epoch = epoch
                self.elections += 1
            elif epoch < self.last_epoch and a.result.error == "":
                raise Violation(f"master epoch went back from {self.last_epoch} to {epoch}")

    # ---- the world --------------------------------------------------------------------
    def _leader(self) -> ControllerNode | None:
        for n in self.nodes.values():
            if n is not None and n.is_leader:
                return n
        return None

    def _propose(self, cmd) -> None:
        leader = self._leader()
        if leader is not None:
            rid = self.next_rid
            self.next_rid += 1
            self._execute(leader.raft.id, leader.propose(rid, cmd, self.w.now))

    def handle(self, kind: str, payload) -> None:
        w, rng = self.w, self.w.rng
        if kind == "tick":
            node = self.nodes.get(payload)
            if node is not None:
                for b in self.alive_brokers:  # brokers heartbeat every controller
                    node.broker_heartbeat(GROUP, b, w.now)
                self._execute(payload, node.tick(w.now))
            w.at(TICK_MS, "tick", payload)
        elif kind == "deliver":
            dst, msg = payload
            node = self.nodes.get(dst)
            if node is not None:
                self._execute(dst, node.step(msg, w.now))
        elif kind == "client":
            leader = self._leader()
            g = leader.metadata.groups.get(GROUP) if leader else None
            r = rng.random()
            if g is None or r < 0.1:
                self._propose(RegisterBroker("c", GROUP, f"b:{rng.choice(BROKERS)}"))
            elif g.master is None or r < 0.2:
                self._propose(ElectMaster(GROUP, tuple(sorted(self.alive_brokers)),
                                          operator=True))
            elif r < 0.7:  # the master shrinks or expands its set
                members = {g.master} | {b for b in BROKERS if rng.random() < 0.6}
                self._propose(AlterSyncStateSet(GROUP, g.master, g.master_epoch,
                                                tuple(sorted(members)), g.set_epoch))
            w.at(rng.randint(20, 200), "client")
        elif kind == "fault":
            if w.steps > self.steps * 0.7:
                return
            r = rng.random()
            if r < 0.3:
                victim = rng.choice(self.ids)
                if self.nodes.get(victim) is not None:
                    self.nodes[victim] = None
                    w.log(f"{victim} crashed")
                    w.at(rng.randint(100, 1500), "restart", victim)
            elif r < 0.5:
                victim = rng.choice(self.ids)
                w.partition([{victim}, set(self.ids) - {victim}])
                w.at(rng.randint(100, 1200), "heal")
            else:  # a broker dies or comes back
                b = rng.choice(BROKERS)
                self.alive_brokers ^= {b}
                w.log(f"broker {b} {'up' if b in self.alive_brokers else 'down'}")
            w.at(rng.randint(100, 600), "fault")
        elif kind == "restart":
            self._start(payload)
            w.log(f"{payload} restarted")
        elif kind == "heal":
            w.net.heal()

    def run(self) -> SimResult:
        w = self.w
        for i in self.ids:
            self._start(i)
            w.at(w.rng.randint(0, TICK_MS), "tick", i)
        w.at(50, "client")
        w.at(300, "fault")
        try:
            w.run_until(lambda: False, self.handle, self.steps)
            self._settle()
        except Violation as e:
            return SimResult(w.seed, False, w.steps, w.now, str(e), list(w.trace),
                             self.stats())
        return SimResult(w.seed, True, w.steps, w.now, stats=self.stats())

    def _settle(self) -> None:
        """Heal, restart, bring every broker back but the master: one must take over."""
        w = self.w
        w.net.heal()
        for i in self.ids:
            if self.nodes.get(i) is None:
                self._start(i)
        leader_deadline = w.now + 10_000
        w.run_until(lambda: self._leader() is not None and GROUP in
                    self._leader().metadata.groups and
                    self._leader().metadata.groups[GROUP].master is not None or
                    w.now > leader_deadline, self.handle, w.steps + 100_000)
        leader = self._leader()
        if leader is None or GROUP not in leader.metadata.groups:
            return  # the group never formed in this run: nothing to fail over
        g = leader.metadata.groups[GROUP]
        if g.master is None:
            raise Violation("after every fault healed, the group has no master")
        dead, epoch = g.master, g.master_epoch
        self.alive_brokers = set(BROKERS) - {dead}
        deadline = w.now + 10_000

        def moved():
            ld = self._leader()
            gg = ld.metadata.groups.get(GROUP) if ld else None
            return gg is not None and gg.master != dead and gg.master_epoch > epoch
        w.run_until(lambda: moved() or w.now > deadline, self.handle, w.steps + 100_000)
        in_set = set(g.sync_state_set) - {dead}
        if in_set and not moved():
            raise Violation(f"master {dead} died and no member of {sorted(in_set)} took "
                            f"over within 10 s")

    def stats(self) -> dict:
        return {"elections": self.elections, "applied": len(self.applied),
                "last_epoch": self.last_epoch}
