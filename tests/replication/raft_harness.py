"""A tiny in-memory harness for Raft cores: messages are delivered in order, every node
ticks every 10 ms, a node in `cut` neither sends nor receives, and `drop` (a predicate on
a message) loses the messages it picks, as a lossy network would."""
import random
from collections import deque

from ledgermq.replication.raft import Complete, Push, RaftConfig, RaftNode, Role, Send

CFG = RaftConfig(election_timeout_ms=100, heartbeat_ms=20, max_push_timeout_ms=50,
                 quorum_ack_timeout_ms=500)
TICK_MS = 10
MAX_MESSAGES_PER_TICK = 100_000  # more is a livelock: nodes answering each other forever


class Harness:
    def __init__(self, n=3, seed=1, cfg=CFG):
        ids = [f"n{i}" for i in range(n)]
        self.nodes = {i: RaftNode(i, ids, cfg, rng=random.Random(f"{seed}{i}")) for i in ids}
        self.now = 0
        self.queue = deque()
        self.cut: set[str] = set()
        self.drop = lambda msg: False
        self.sent: list[tuple[int, object]] = []  # (when, message) of every message sent
        self.done: dict[int, Complete] = {}

    def apply(self, actions):
        for a in actions:
            if isinstance(a, Send) and isinstance(a.msg, Push) and a.msg.entries:
                # whatever the log holds, a push's entries start at the index it names
                assert a.msg.entries[0].index == a.msg.index, a.msg
            if isinstance(a, Send):
                self.sent.append((self.now, a.msg))
                if a.msg.src not in self.cut and a.msg.dst not in self.cut and \
                        not self.drop(a.msg):
                    self.queue.append(a.msg)
            elif isinstance(a, Complete):
                self.done[a.request_id] = a

    def run(self, ms, until=None):
        """Run `ms` of time (in ticks), or until `until()` holds after a tick's messages."""
        for _ in range(ms // TICK_MS):
            self.now += TICK_MS
            for n in self.nodes.values():
                if n.id not in self.cut:
                    self.apply(n.tick(self.now))
            delivered = 0
            while self.queue:
                delivered += 1
                assert delivered <= MAX_MESSAGES_PER_TICK, \
                    f"livelock at {self.now} ms: {list(self.queue)[-4:]}"
                m = self.queue.popleft()
                self.apply(self.nodes[m.dst].step(m, self.now))
            if until is not None and until():
                return True
        return False

    def leader(self):
        leaders = [n for n in self.nodes.values() if n.role is Role.LEADER and n.id not in self.cut]
        return leaders[0] if len(leaders) == 1 else None
