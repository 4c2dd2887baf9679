"""Raft (DLedger mode) in the simulator: real RaftNode objects, a disk per node that loses
unsynced writes on a crash (and may tear the last one), random faults, clients appending
throughout, and a checker after every step.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..replication.raft import (
    AppendEntries, Code, Complete, Entry, RaftConfig, RaftNode, ResetLog, Role, SaveCommit,
    SaveMeta, Send, TruncateAfter,
)
from ..replication.raft.types import PERSIST_ACTIONS
from .world import SimResult, Violation, World

TICK_MS = 20

# Named fault profiles. "random" draws one per seed; "nemesis" times faults at the worst
# moments (a leader cut off as it takes a write, crashed as a commit lands) and is what the
# known-bug tests hunt with.
PROFILES: dict[str, dict | None] = {
    "random": None,
    "nemesis": {"nodes": 3, "client_gap": (100, 400), "fault_gap": (100, 400),
                "crash_at_commit": 0.3, "cut_at_append": 0.3},
}


@dataclass
class Disk:
    """What survives a crash: only what was fsynced."""

    term: int = 0
    voted_for: str | None = None
    log: list[Entry] = field(default_factory=list)
    commit: int = -1

    def apply(self, action) -> None:
        if isinstance(action, SaveMeta):
            self.term, self.voted_for = action.term, action.voted_for
        elif isinstance(action, AppendEntries):
            self.log.extend(action.entries)
        elif isinstance(action, TruncateAfter):
            self.log = [e for e in self.log if e.index <= action.index]
        elif isinstance(action, ResetLog):
            self.log = [action.entry]
        elif isinstance(action, SaveCommit):
            self.commit = max(self.commit, action.index)


class Checker:
    """Raft's safety properties, checked after every step (incrementally)."""

    def __init__(self):
        self.leaders: dict[int, str] = {}  # term -> leader
        self.chain: dict[tuple[int, int], bytes] = {}  # (index, term) -> prefix hash
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, data)
        self.acked: dict[int, tuple[bytes, int]] = {}  # index -> (data, term it committed in)
        self.commit_seen: dict[str, int] = {}
        self.hashes: dict[str, list[bytes]] = {}  # node -> prefix hash of each entry
        self.anchored: dict[str, bool] = {}  # node's log starts at index 0

    @staticmethod
    def _h(prev: bytes, e: Entry) -> bytes:
        return hashlib.blake2b(prev + e.index.to_bytes(8, "big") + e.term.to_bytes(8, "big")
                               + e.data, digest_size=12).digest()

    def load(self, node_id: str, log: list[Entry]) -> None:
        """A node (re)starts with `log`."""
        self.hashes[node_id] = []
        self.anchored[node_id] = not log or log[0].index == 0
        self.appended(node_id, log)

    def appended(self, node_id: str, entries) -> None:
        hashes = self.hashes[node_id]
        if not self.anchored[node_id]:
            return
        for e in entries:
            if e.index != len(hashes):
                raise Violation(f"{node_id} appended entry {e.index} after {len(hashes) - 1}")
            h = self._h(hashes[-1] if hashes else b"", e)
            hashes.append(h)
            seen = self.chain.setdefault((e.index, e.term), h)
            if seen != h:
                raise Violation(f"log matching broken on {node_id}: entry ({e.index}, term "
                                f"{e.term}) follows a different prefix than elsewhere")

    def truncated(self, node_id: str, index: int) -> None:
        del self.hashes[node_id][index + 1:]

    def reset(self, node_id: str, entry: Entry) -> None:
        self.load(node_id, [entry])

    def check_node(self, n: RaftNode, incarnation: int) -> None:
        if n.role is Role.LEADER:
            other = self.leaders.setdefault(n.term, n.id)
            if other != n.id:
                raise Violation(f"two leaders in term {n.term}: {other} and {n.id}")
        if n.commit > n.end:
            raise Violation(f"{n.id} committed index {n.commit} is above its end {n.end}")
        key = f"{n.id}#{incarnation}"
        seen = self.commit_seen.get(key, -1)
        if n.commit < seen:
            raise Violation(f"{n.id} committed index went back from {seen} to {n.commit}")
        for i in range(max(seen + 1, n.begin), n.commit + 1):
            e = n.entry(i)
            prev = self.committed.setdefault(i, (e.term, e.data))
            if prev != (e.term, e.data):
                raise Violation(f"committed entry {i} differs on {n.id}: {prev} vs "
                                f"({e.term}, {e.data!r})")
        self.commit_seen[key] = n.commit

    def became_leader(self, n: RaftNode) -> None:
        """Leader completeness: what was acknowledged in term T is in every leader of a
        later term (a leader of an older term may still turn up late, and is harmless)."""
        for index, (data, term) in self.acked.items():
            if n.term <= term or index < n.begin:  # (below begin: committed, then compacted)
                continue
            e = n.entry(index)
            if e is None or e.data != data:
                raise Violation(f"acknowledged append at {index} ({data!r}, term {term}) is "
                                f"missing from leader {n.id} of term {n.term} (has {e})")

    def acknowledged(self, index: int, data: bytes, term: int) -> None:
        prev = self.acked.setdefault(index, (data, term))
        if prev[0] != data:
            raise Violation(f"two different appends acknowledged at index {index}")


class RaftSim:
    def __init__(self, seed: int, *, nodes: int | None = None,
                 bugs: frozenset[str] = frozenset(), steps: int = 5000,
                 profile: dict | None = None):
        self.world = World(seed)
        self.rng = self.world.rng
        # each seed draws its own profile: group size, client rate, fault rate
        profile = dict(profile or {})
        nodes = nodes or profile.pop("nodes", None) or self.rng.choice([3, 3, 5])
        self.client_gap = self.rng.choice([(5, 40), (50, 200), (300, 1200)])
        self.fault_gap = self.rng.choice([(200, 900), (100, 400)])
        self.crash_mid_step = self.rng.choice([0.002, 0.01])
        self.crash_at_commit = self.rng.choice([0.0, 0.02, 0.1])
        self.cut_at_append = self.rng.choice([0.0, 0.02, 0.1])
        for key, value in (profile or {}).items():  # a fixed fault profile, e.g. for a bug hunt
            setattr(self, key, value)
        self.ids = [f"n{i}" for i in range(nodes)]
        self.cfg = RaftConfig(election_timeout_ms=300, heartbeat_ms=60, max_push_timeout_ms=200,
                              max_batch_entries=8, max_pending_size=16,
                              quorum_ack_timeout_ms=1500, bugs=bugs)
        self.max_steps = steps
        self.disks = {i: Disk() for i in self.ids}
        self.nodes: dict[str, RaftNode | None] = {}
        self.incarnation = {i: 0 for i in self.ids}
        self.paused: set[str] = set()
        self.held: dict[str, list] = {i: [] for i in self.ids}
        self.checker = Checker()
        self.requests: dict[int, bytes] = {}
        self.next_rid = 1
        self.stats = {"leaders": 0, "acked": 0, "crashes": 0, "partitions": 0, "pauses": 0,
                      "torn_writes": 0, "compactions": 0}
        self.faults_on = True
        self.was_leader: dict[str, bool] = {}
        for i in self.ids:
            self._boot(i)
            self.world.at(self.rng.randint(0, TICK_MS), "tick", i)
        self.world.at(50, "client")
        self.world.at(300, "fault")

    # ---- nodes ----------------------------------------------------------------------
    def _boot(self, node_id: str) -> None:
        d = self.disks[node_id]
        self.nodes[node_id] = RaftNode(node_id, self.ids, self.cfg, term=d.term,
                                       voted_for=d.voted_for, log=list(d.log), commit=d.commit,
                                       rng=self.rng.__class__(self.rng.random()),
                                       now=self.world.now)
        self.incarnation[node_id] += 1
        self.checker.load(node_id, d.log)

    def _execute(self, node_id: str, actions: list) -> None:
        """Run a step's actions with the driver contract; a crash may strike mid-way."""
        node = self.nodes[node_id]
        was_leader = self.was_leader.get(node_id, False)
        self.was_leader[node_id] = node.role is Role.LEADER
        crash_at = len(actions) + 1
        if self.faults_on and self.rng.random() < self.crash_mid_step:
            crash_at = self.rng.randint(0, len(actions))
        unsynced = []
        for a in actions:  # the in-memory log already reflects them all
            if isinstance(a, AppendEntries):
                self.checker.appended(node_id, a.entries)
            elif isinstance(a, TruncateAfter):
                self.checker.truncated(node_id, a.index)
            elif isinstance(a, ResetLog):
                self.checker.reset(node_id, a.entry)
        for k, a in enumerate(actions):
            if k == crash_at:
                self._crash(node_id, unsynced)
                return
            if isinstance(a, PERSIST_ACTIONS):
                unsynced.append(a)
                continue
            for u in unsynced:  # fsync before anything leaves the node
                self.disks[node_id].apply(u)
            unsynced = []
            if isinstance(a, Send):
                self.world.send(node_id, a.msg.dst, a.msg)
            elif isinstance(a, Complete):
                self._complete(a)
        for u in unsynced:
            self.disks[node_id].apply(u)
        if node.role is Role.LEADER and not was_leader:
            self.stats["leaders"] += 1
            self.world.log(f"{node_id} leads term {node.term} (end {node.end}, "
                           f"commit {node.commit})")
            self.checker.became_leader(node)
        if node.role is Role.LEADER and self.faults_on and \
                any(isinstance(a, SaveCommit) for a in actions) and \
                self.rng.random() < self.crash_at_commit:
            self.world.log(f"{node_id} crashes right after committing {node.commit}")
            self._crash(node_id, [])  # the nemesis picks the moment a commit lands

    def _crash(self, node_id: str, unsynced: list) -> None:
        """Lose unsynced writes; the last AppendEntries may land torn (a prefix)."""
        appends = [a for a in unsynced if isinstance(a, AppendEntries)]
        if appends and self.rng.random() < 0.5:
            last = appends[-1]
            keep = self.rng.randint(0, len(last.entries))
            disk = self.disks[node_id]
            if keep and disk.log and last.entries[0].index == disk.log[-1].index + 1:
                disk.log.extend(last.entries[:keep])
                self.stats["torn_writes"] += 1
        self.nodes[node_id] = None
        self.was_leader[node_id] = False
        self.stats["crashes"] += 1
        self.world.log(f"{node_id} crashed (lost {len(unsynced)} unsynced writes)")
        self.world.at(self.rng.randint(100, 1500), "restart", node_id)

    def _complete(self, a: Complete) -> None:
        data = self.requests.pop(a.request_id, None)
        if a.code is Code.SUCCESS and data is not None:
            self.checker.acknowledged(a.index, data, a.term)
            self.stats["acked"] += 1
            self.last_ack_ms = self.world.now

    # ---- events ---------------------------------------------------------------------
    def handle(self, kind: str, payload) -> None:
        w = self.world
        if kind == "tick":
            node = self.nodes.get(payload)
            if node is not None and payload not in self.paused:
                self._execute(payload, node.tick(w.now))
            w.at(TICK_MS, "tick", payload)
        elif kind == "deliver":
            dst, msg = payload
            node = self.nodes.get(dst)
            if node is None:
                return
            if dst in self.paused:
                self.held[dst].append(msg)
                return
            self._execute(dst, node.step(msg, w.now))
        elif kind == "client":
            self._client()
            w.at(self.rng.randint(*self.client_gap), "client")
        elif kind == "restart":
            if self.nodes.get(payload) is None:
                self._boot(payload)
                w.log(f"{payload} restarted (term {self.disks[payload].term}, log end "
                      f"{self.disks[payload].log[-1].index if self.disks[payload].log else -1})")
        elif kind == "resume":
            self.paused.discard(payload)
            w.log(f"{payload} resumed")
            for msg in self.held[payload]:
                w.at(0, "deliver", (payload, msg))
            self.held[payload] = []
        elif kind == "heal":
            w.net.heal()
            w.log("network healed")
        elif kind == "fault":
            if self.faults_on:
                self._fault()
                w.at(self.rng.randint(*self.fault_gap), "fault")
        for node_id, node in self.nodes.items():
            if node is not None:
                self.checker.check_node(node, self.incarnation[node_id])

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
        if node.role is Role.LEADER and self.faults_on and self.rng.random() < self.cut_at_append:
            # the nemesis cuts the leader off just as it takes a write
            others = set(self.ids) - {target}
            self.world.partition([{target}, others])
            self.world.log(f"leader {target} isolated as it appends {data!r}")
            self.world.at(self.rng.randint(300, 2000), "heal")
        self._execute(target, node.propose(rid, data, self.world.now))

    def _fault(self) -> None:
        w, rng = self.world, self.rng
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
                self.stats["partitions"] += 1
                w.at(rng.randint(300, 2000), "heal")
            return
        if choice < 0.25:
            victim = rng.choice(self.ids)
            if self.nodes.get(victim) is not None:
                self._crash(victim, [])
        elif choice < 0.35:
            victim = rng.choice(self.ids)
            if victim not in self.paused and self.nodes.get(victim) is not None:
                self.paused.add(victim)
                self.stats["pauses"] += 1
                w.log(f"{victim} paused")
                w.at(rng.randint(200, 1500), "resume", victim)
        elif choice < 0.6:
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
            self.stats["partitions"] += 1
            w.at(rng.randint(300, 2000), "heal")
        elif choice < 0.75:
            w.net.loss = rng.choice([0.0, 0.05, 0.2])
            w.net.duplicate = rng.choice([0.0, 0.05, 0.1])
            w.net.max_delay_ms = rng.choice([5, 20, 60])
            w.log(f"network: loss {w.net.loss}, dup {w.net.duplicate}, "
                  f"delay <= {w.net.max_delay_ms}ms")
        elif choice < 0.85:
            self._retention(rng.choice(self.ids))

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
        self.stats["compactions"] += 1
        self.world.log(f"{node_id} compacted its log through {through}")

    # ---- run ------------------------------------------------------------------------
    def run(self) -> SimResult:
        w = self.world
        try:
            w.run_until(lambda: False, self.handle, self.max_steps)
            # liveness: heal everything, then new appends must commit in bounded time
            self.faults_on = False
            w.net.heal()
            w.net.max_delay_ms = 10
            for i in self.ids:
                if self.nodes.get(i) is None:
                    self._boot(i)
                if i in self.paused:
                    w.at(0, "resume", i)
            w.log("all faults healed")
            healed_at = w.now
            self.last_ack_ms = -1
            deadline = healed_at + 10_000
            w.run_until(lambda: self.last_ack_ms > healed_at + 500 or w.now > deadline,
                        self.handle, self.max_steps * 4)
            if self.last_ack_ms <= healed_at + 500:
                raise Violation("no progress: nothing committed within 10 s after all "
                                "faults healed")
            return SimResult(w.seed, True, w.steps, w.now, stats=self.stats)
        except Violation as v:
            w.log(f"VIOLATION: {v}")
            return SimResult(w.seed, False, w.steps, w.now, str(v), list(w.trace), self.stats)
