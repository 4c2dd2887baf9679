"""Raft (DLedger mode, S0) in the simulator: real RaftNode objects, a RaftDisk per node that
loses unsynced writes on a crash (and may tear the last one), crashes in the middle of a
step, pauses, partitions (full, one-way, bridged), message loss and duplication,
retention, a leader whose appends are lost while its heartbeats pass (its clients' appends
time out waiting for a quorum), disk corruption on a minority node (a crash, and on
restart its CRCs cut a suffix of synced entries; with the leader killed at once, as in
issue #17), clients appending throughout; Raft's safety properties (`raft_checker`) are
checked after every step, and once faults heal new appends must commit (liveness).
"""
from __future__ import annotations

from typing import ClassVar

from ..replication.raft import (
    BUGS, AppendEntries, Code, Complete, Push, PushType, RaftConfig, RaftNode, ResetLog, Role,
    SaveCommit, Send, TruncateAfter,
)
from .disk import RaftDisk
from .events import CLIENT, FAULT, HEAL, Client, Deliver, Fault, Heal, Restart, Resume, Tick
from .harness import LIVENESS, Simulation
from .raft_checker import INVARIANTS, Checker

TICK_MS = 20

# Named fault profiles. "random" draws one per seed; "nemesis" times faults at the worst
# moments (a leader cut off as it takes a write, crashed as a commit lands) and is what the
# known-bug tests hunt with.
PROFILES: dict[str, dict | None] = {
    "random": None,
    "nemesis": {"nodes": 3, "client_gap": (100, 400), "fault_gap": (100, 400),
                "crash_at_commit": 0.3, "cut_at_append": 0.3},
}


class RaftSim(Simulation):
    BUGS = BUGS
    INVARIANTS: ClassVar[dict[str, str]] = {**INVARIANTS,
                  LIVENESS: "after every fault heals, an append commits within 10 s"}
    FAULT_SHARE = 1.0  # faults all run long; settling alone is calm

    def __init__(self, seed: int, *, nodes: int | None = None, bugs=frozenset(),
                 steps: int = 5000, profile: dict | None = None, trace_events: bool = False):
        super().__init__(seed, steps=steps, bugs=bugs, trace_events=trace_events)
        rng = self.rng
        # each seed draws its own profile: group size, client rate, fault rate
        profile = dict(profile or {})
        nodes = nodes or profile.pop("nodes", None) or rng.choice([3, 3, 5])
        self.client_gap = rng.choice([(5, 40), (50, 200), (300, 1200)])
        self.fault_gap = rng.choice([(200, 900), (100, 400)])
        self.crash_mid_step = rng.choice([0.002, 0.01])
        self.crash_at_commit = rng.choice([0.0, 0.02, 0.1])
        self.cut_at_append = rng.choice([0.0, 0.02, 0.1])
        for key, value in profile.items():  # a fixed fault profile, e.g. for a bug hunt
            setattr(self, key, value)
        self.ids = [f"n{i}" for i in range(nodes)]
        self.cfg = RaftConfig(election_timeout_ms=300, heartbeat_ms=60, max_push_timeout_ms=200,
                              max_batch_entries=8, max_pending_size=16,
                              quorum_ack_timeout_ms=1500, bugs=self.bugs)
        self.disks = {i: RaftDisk() for i in self.ids}
        self.nodes: dict[str, RaftNode | None] = {}
        self.incarnation = {i: 0 for i in self.ids}
        self.paused: set[str] = set()
        self.held: dict[str, list] = {i: [] for i in self.ids}
        self.checker = Checker()
        self.requests: dict[int, bytes] = {}
        self.next_rid = 1
        self.last_ack_ms = -1
        self.counts = {"leaders": 0, "acked": 0, "crashes": 0, "partitions": 0, "pauses": 0,
                       "torn_writes": 0, "compactions": 0, "quorum_ack_timeouts": 0,
                       "corruptions": 0}
        self.was_leader: dict[str, bool] = {}
        self.appends_lost: tuple[str, int] | None = None  # (leader, until when)
        self._ticks = {i: Tick(i) for i in self.ids}

    def start(self) -> None:
        self.boot_all(self._boot, self._ticks, TICK_MS)

    # ---- nodes ----------------------------------------------------------------------
    def _boot(self, node_id: str) -> None:
        d = self.disks[node_id]
        d.promise_kept()  # (a promise already kept is forgotten, as the driver does)
        self.nodes[node_id] = RaftNode(node_id, self.ids, self.cfg, term=d.term,
                                       voted_for=d.voted_for, log=list(d.log), commit=d.commit,
                                       rng=self.rng.__class__(self.rng.random()),
                                       now=self.w.now, promised=d.promised)
        self.incarnation[node_id] += 1
        self.checker.load(node_id, d.log)

    def _execute(self, node_id: str, actions: list) -> None:
        """Run a step's actions with the driver contract; a crash may strike mid-way."""
        node = self.nodes[node_id]
        was_leader = self.was_leader.get(node_id, False)
        self.was_leader[node_id] = node.role is Role.LEADER
        crash_at = None
        if self.faulting and self.rng.random() < self.crash_mid_step:
            crash_at = self.rng.randint(0, len(actions))
        for a in actions:  # the in-memory log already reflects them all
            if isinstance(a, AppendEntries):
                self.checker.appended(node_id, a.entries)
            elif isinstance(a, TruncateAfter):
                self.checker.truncated(node_id, a.index)
            elif isinstance(a, ResetLog):
                self.checker.reset(node_id, a.entry)
        lost = self.disks[node_id].carry_out(actions, self._act, node_id, crash_at)
        if lost is not None:
            self._crash(node_id, lost)
            return
        if node.role is Role.LEADER and not was_leader:
            self.counts["leaders"] += 1
            self.w.log(f"{node_id} leads term {node.term} (end {node.end}, "
                       f"commit {node.commit})")
            self.checker.became_leader(node)
        if node.role is Role.LEADER and self.faulting and \
                any(isinstance(a, SaveCommit) for a in actions) and \
                self.rng.random() < self.crash_at_commit:
            self.w.log(f"{node_id} crashes right after committing {node.commit}")
            self._crash(node_id, [])  # the nemesis picks the moment a commit lands

    def _act(self, node_id: str, a) -> None:
        if isinstance(a, Send):
            if self._loses_append(node_id, a.msg):
                return
            self.w.send(node_id, a.msg.dst, a.msg)
        elif isinstance(a, Complete):
            self._complete(a)

    def _loses_append(self, node_id: str, msg) -> bool:
        lost = self.appends_lost
        if lost is None or lost[0] != node_id or self.w.now >= lost[1]:
            return False
        return isinstance(msg, Push) and msg.kind is PushType.APPEND

    def _crash(self, node_id: str, unsynced: list) -> None:
        """Lose unsynced writes; the last AppendEntries may land torn (a prefix)."""
        appends = [a for a in unsynced if isinstance(a, AppendEntries)]
        if appends and self.rng.random() < 0.5:
            last = appends[-1]
            keep = self.rng.randint(0, len(last.entries))
            disk = self.disks[node_id]
            if keep and disk.log and last.entries[0].index == disk.log[-1].index + 1:
                disk.log.extend(last.entries[:keep])
                self.counts["torn_writes"] += 1
        self.nodes[node_id] = None
        self.was_leader[node_id] = False
        self.counts["crashes"] += 1
        self.w.log(f"{node_id} crashed (lost {len(unsynced)} unsynced writes)")
        self.w.at(self.rng.randint(100, 1500), Restart(node_id))

    def _complete(self, a: Complete) -> None:
        data = self.requests.pop(a.request_id, None)
        if a.code is Code.WAIT_QUORUM_ACK_TIMEOUT:
            # not acknowledged (the checker never hears of it), though it may commit later
            self.counts["quorum_ack_timeouts"] += 1
        if a.code is Code.SUCCESS and data is not None:
            self.checker.acknowledged(a.index, data, a.term)
            self.counts["acked"] += 1
            self.last_ack_ms = self.w.now

    # ---- events ---------------------------------------------------------------------
    def handle(self, event) -> None:
        (self._handlers.get(type(event)) or self._handler(type(event)))(event)
        check, incarnation = self.checker.check_node, self.incarnation
        for node_id, node in self.nodes.items():  # safety, after every step
            if node is not None:
                check(node, incarnation[node_id])

    def on_tick(self, ev: Tick) -> None:
        node = self.nodes.get(ev.node)
        if node is not None and ev.node not in self.paused:
            self._execute(ev.node, node.tick(self.w.now))
        self.w.at(TICK_MS, ev)

    def on_deliver(self, ev: Deliver) -> None:
        node = self.nodes.get(ev.dst)
        if node is None:
            return
        if ev.dst in self.paused:
            self.held[ev.dst].append(ev.msg)
            return
        self._execute(ev.dst, node.step(ev.msg, self.w.now))

    def on_client(self, _: Client) -> None:
        self._client()
        self.w.at(self.rng.randint(*self.client_gap), CLIENT)

    def on_restart(self, ev: Restart) -> None:
        if self.nodes.get(ev.node) is None:
            self._boot(ev.node)
            d = self.disks[ev.node]
            self.w.log(f"{ev.node} restarted (term {d.term}, log end "
                       f"{d.log[-1].index if d.log else -1})")

    def on_resume(self, ev: Resume) -> None:
        self.paused.discard(ev.node)
        self.w.log(f"{ev.node} resumed")
        for msg in self.held[ev.node]:
            self.w.at(0, Deliver(ev.node, msg))
        self.held[ev.node] = []

    def on_heal(self, _: Heal) -> None:
        self.w.net.heal()
        self.w.log("network healed")

    def on_fault(self, _: Fault) -> None:
        if self.faulting:
            self._fault()
            self.w.at(self.rng.randint(*self.fault_gap), FAULT)

    def _client(self) -> None:
        live = [i for i, n in self.nodes.items() if n is not None and i not in self.paused]
        if not live:
            return
        leaders = [i for i in live if self.nodes[i].role is Role.LEADER]
        target = self.rng.choice(leaders or live)
        rid = self.next_rid
        self.next_rid += 1
        data = f"m{rid}".encode()
        self.requests[rid] = data
        node = self.nodes[target]
        if node.role is Role.LEADER and self.faulting and self.rng.random() < self.cut_at_append:
            # the nemesis cuts the leader off just as it takes a write
            self.w.partition([{target}, set(self.ids) - {target}])
            self.w.log(f"leader {target} isolated as it appends {data!r}")
            self.w.at(self.rng.randint(300, 2000), HEAL)
        self._execute(target, node.propose(rid, data, self.w.now))

    # ---- faults ---------------------------------------------------------------------
    def _fault(self) -> None:
        w, rng = self.w, self.rng
        choice = rng.random()
        leaders = [i for i, n in self.nodes.items() if n is not None and n.role is Role.LEADER]
        if leaders and choice < 0.2:
            # the leader's bad day: crashed or cut off right after taking appends
            victim = rng.choice(leaders)
            if rng.random() < 0.5:
                self._crash(victim, [])
            else:
                w.partition([{victim}, set(self.ids) - {victim}])
                w.log(f"leader {victim} isolated")
                self.counts["partitions"] += 1
                w.at(rng.randint(300, 2000), HEAL)
            return
        if choice < 0.25:
            victim = rng.choice(self.ids)
            if self.nodes.get(victim) is not None:
                self._crash(victim, [])
        elif choice < 0.35:
            victim = rng.choice(self.ids)
            if victim not in self.paused and self.nodes.get(victim) is not None:
                self.paused.add(victim)
                self.counts["pauses"] += 1
                w.log(f"{victim} paused")
                w.at(rng.randint(200, 1500), Resume(victim))
        elif choice < 0.6:
            self._partition()
        elif choice < 0.75:
            w.net.loss = rng.choice([0.0, 0.05, 0.2])
            w.net.duplicate = rng.choice([0.0, 0.05, 0.1])
            w.net.max_delay_ms = rng.choice([5, 20, 60])
            w.log(f"network: loss {w.net.loss}, dup {w.net.duplicate}, "
                  f"delay <= {w.net.max_delay_ms}ms")
        elif choice < 0.85:
            self._retention(rng.choice(self.ids))
        elif choice < 0.92 and leaders:
            # heartbeats (COMMIT) and COMPARE/TRUNCATE get through, so check-quorum keeps
            # it leading, but no APPEND does: its appends wait for a quorum that never acks
            victim = rng.choice(leaders)
            self.appends_lost = (victim, w.now + rng.randint(1500, 4000))
            w.log(f"leader {victim} loses its appends until {self.appends_lost[1]}ms")
        elif choice < 0.97:
            self._corrupt(leaders)

    def _corrupt(self, leaders: list[str]) -> None:
        """Disk corruption on a minority node: the follower furthest ahead (the one most
        likely to hold entries another lacks) crashes, and its restart finds a suffix of
        its synced entries unreadable; half the time the leader dies at once too. One
        damaged node at a time: until it is refilled the damage stays a minority's."""
        rng = self.rng
        if any(not d.promise_kept() for d in self.disks.values()):
            return
        followers = [i for i, n in self.nodes.items()
                     if n is not None and n.role is not Role.LEADER and len(self.disks[i].log) > 1]
        if not followers:
            return
        victim = max(followers, key=lambda i: (self.nodes[i].end, rng.random()))
        self._crash(victim, [])
        disk = self.disks[victim]
        lose = rng.randint(1, min(len(disk.log) - 1, 40))
        disk.corrupt_tail(lose)
        self.counts["corruptions"] += 1
        self.w.log(f"{victim}'s disk lost its last {lose} synced entries (promised "
                   f"{disk.promised})")
        if leaders and rng.random() < 0.5 and self.nodes.get(leaders[0]) is not None:
            self._crash(leaders[0], [])

    def _partition(self) -> None:
        """Two sides, a one-way cut, or a bridge (one node talks to both sides)."""
        w, rng = self.w, self.rng
        ids = self.ids[:]
        rng.shuffle(ids)
        kind = rng.random()
        if kind < 0.5:
            cut = rng.randint(1, len(ids) - 1)
            w.partition([set(ids[:cut]), set(ids[cut:])])
            w.log(f"partition {sorted(ids[:cut])} | {sorted(ids[cut:])}")
        elif kind < 0.75:
            a, b = ids[0], ids[1]
            w.net.blocked.add((a, b))
            w.log(f"one-way cut {a} -> {b}")
        else:
            w.bridge(ids)
        self.counts["partitions"] += 1
        w.at(rng.randint(300, 2000), HEAL)

    def _retention(self, node_id: str) -> None:
        """Retention on one node: its oldest committed entries are deleted (memory and
        disk alike), so a peer that still needs them must be reset to its first entry."""
        node = self.nodes.get(node_id)
        if node is None:
            return
        through = node.commit - self.rng.randint(0, 20)
        if through < node.begin:
            return
        node.log.compact_through(through)
        disk = self.disks[node_id]
        disk.log = [e for e in disk.log if e.index > through] or disk.log[-1:]
        self.counts["compactions"] += 1
        self.w.log(f"{node_id} compacted its log through {through}")

    # ---- settling -------------------------------------------------------------------
    def recover(self) -> None:
        self.appends_lost = None
        for i in self.ids:
            if self.nodes.get(i) is None:
                self._boot(i)
            if i in self.paused:
                self.w.at(0, Resume(i))

    def check_liveness(self) -> None:
        healed_at = self.w.now
        self.last_ack_ms = -1
        self.expect(lambda: self.last_ack_ms > healed_at + 500,
                    "no progress: nothing committed within 10 s after all faults healed")

    def stats(self) -> dict:
        return dict(self.counts)
