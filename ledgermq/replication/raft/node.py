"""A DLedger-style Raft replica as a pure state machine.

Inputs: `step(message, now)`, `tick(now)`, `propose(data, now)`, `transfer_leadership`.
Outputs: lists of actions (see messages.py for the driver contract). No sockets, clocks,
threads or files: the broker drives it with asyncio, the simulator with virtual time.

This module is the glue: the node's state, its inputs, and the changes of role. The
protocol lives beside it, one concept a module, mixed into RaftNode:
  election.py   pre-vote, votes, the leader's check that a majority still hears it
  leader.py     pushes to each peer (per-peer state in progress.py), the quorum ack checker
  follower.py   pushes applied in order, truncation and resets, the committed index
Invariants: a proposal's Complete comes exactly once (committed, TERM_CHANGED when its
leader steps down, or WAIT_QUORUM_ACK_TIMEOUT); `commit` never moves back.
"""
from __future__ import annotations

import random
from typing import Any

from .election import Elections
from .follower import FollowerLog
from .leader import LeaderReplication
from .log import MemoryLog, RaftLog
from .messages import (
    Action, AppendEntries, Code, Complete, Entry, Message, Push, PushResponse, PushType, RaftConfig,
    Role, SaveMeta, TimeoutNow, VoteRequest, VoteResponse,
)
from .progress import Dispatcher

# Known protocol bugs, switched on only by tests and `ledgermq sim --inject-bug`.
BUGS = {
    "commit-old-term": "count a quorum for an entry of an older term (Raft's figure 8)",
    "truncate-to-commit": "truncate a rejoining follower to its committed index instead "
                          "of comparing logs",
    "vote-by-current-term": "up-to-date check compares the candidate's current term, not "
                            "its last entry's term",
    "commit-past-end": "follower advances its committed index past what it holds",
    "vote-with-lost-entries": "a node whose disk lost entries it had acknowledged votes "
                              "and campaigns by the log it has left",
}


class RaftNode(Elections, LeaderReplication, FollowerLog):
    def __init__(self, node_id: str, peers: list[str], config: RaftConfig | None = None, *,
                 term: int = 0, voted_for: str | None = None,
                 log: RaftLog | list[Entry] | None = None,
                 commit: int = -1, rng: random.Random | None = None, now: int = 0,
                 promised: tuple[int, int] | None = None) -> None:
        self.id = node_id
        self.peers = [p for p in peers if p != node_id]
        self.cfg = config or RaftConfig()
        self.bugs = self.cfg.bugs
        self.rng = rng or random.Random()
        self.term = term
        self.voted_for = voted_for
        # a list of entries (kept in memory) or any object with MemoryLog's methods
        self.log: RaftLog = MemoryLog(log or []) if log is None or isinstance(log, list) else log
        self.commit = min(commit, self.end)
        # (last term, last index) of a log this node held, and may have acknowledged, before
        # its disk lost the tail (CRC damage found on restart): see Elections._vote_floor
        self.promised = promised
        self.role = Role.FOLLOWER
        self.leader: str | None = None
        self.last_heard = now
        self.transfer_to: str | None = None
        self.transfer_started = 0
        # elections (election.py)
        self.election_deadline = now + self._election_timeout()
        self.votes: set[str] = set()
        self.pre_votes: set[str] = set()
        self.pre_voting = False
        # leading (leader.py)
        self.dispatchers: dict[str, Dispatcher] = {}
        self.watermarks: dict[int, dict[str, int]] = {}
        self.waiters: dict[int, tuple[int, int, int]] = {}
        self.leader_since = 0
        self.last_reply: dict[str, int] = {}  # when each peer last answered
        # following (follower.py)
        self.pending_appends: dict[int, tuple[Push, int]] = {}
        self.match_end = -1

    # ---- log helpers ----------------------------------------------------------------
    @property
    def begin(self) -> int:
        return self.log.begin

    @property
    def end(self) -> int:
        return self.log.end

    @property
    def last_term(self) -> int:
        return self.log.last_term

    def entry(self, index: int) -> Entry | None:
        return self.log.entry(index)

    def term_at(self, index: int) -> int | None:
        return self.log.term_at(index)

    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]:
        """Entries lo..hi inclusive that we hold."""
        return self.log.entries(lo, hi)

    @property
    def quorum(self) -> int:
        return (len(self.peers) + 1) // 2 + 1

    # ---- inputs ---------------------------------------------------------------------
    def tick(self, now: int) -> list[Action]:
        out: list[Action] = []
        if self.role is Role.LEADER:
            if self._lost_quorum(now):
                self._become_follower(self.term, None, now, out)
                return out
            if self.transfer_to is not None and \
                    now - self.transfer_started >= 2 * self.cfg.election_timeout_ms:
                self.transfer_to = None  # the target did not take over: serve writes again
            for peer in self.peers:
                self._dispatch(peer, now, out, housekeeping=True)
            self._expire_waiters(now, out)
        elif now >= self.election_deadline:
            self._start_pre_vote(now, out)
        if self.role is not Role.LEADER:
            self._check_gaps(now, out)
        return out

    def propose(self, request_id: int, data: bytes, now: int,
                dispatch: bool = True) -> list[Action]:
        """A client append: completes (Complete action) once committed, or with an error.

        With dispatch=False the entry waits for the next `replicate` (or tick), so that
        appends arriving together travel in one push."""
        if self.role is not Role.LEADER or self.transfer_to is not None:
            return [Complete(request_id, Code.NOT_LEADER)]
        entry = Entry(self.end + 1, self.term, data)
        self.log.append((entry,))
        out: list[Action] = [AppendEntries((entry,))]
        self.waiters[request_id] = (entry.index, self.term, now + self.cfg.quorum_ack_timeout_ms)
        self._advance_commit(out)  # a group of one commits at once
        if dispatch:
            for peer in self.peers:
                self._dispatch(peer, now, out)
        return out

    def replicate(self, now: int) -> list[Action]:
        """Push what is new to every peer."""
        out: list[Action] = []
        if self.role is Role.LEADER:
            for peer in self.peers:
                self._dispatch(peer, now, out)
        return out

    def caught_up(self, peer: str) -> bool:
        """Does `peer` hold the leader's whole log (a transfer to it can start at once)?"""
        return self.watermarks.get(self.term, {}).get(peer, -1) >= self.end

    def transfer_leadership(self, target: str, now: int) -> list[Action]:
        """Hand leadership to `target` once it has caught up (RocketMQ's preferred leader)."""
        if self.role is not Role.LEADER or target not in self.peers:
            return []
        self.transfer_to = target
        self.transfer_started = now
        out: list[Action] = []
        self._maybe_send_timeout_now(now, out)
        return out

    def step(self, msg: Message, now: int) -> list[Action]:
        out: list[Action] = []
        # (pushes and their answers first: one of each every replicated entry)
        if isinstance(msg, Push):
            self._on_push(msg, now, out)
        elif isinstance(msg, PushResponse):
            self._on_push_response(msg, now, out)
        elif isinstance(msg, VoteRequest):
            self._on_vote_request(msg, now, out)
        elif isinstance(msg, VoteResponse):
            self._on_vote_response(msg, now, out)
        elif isinstance(msg, TimeoutNow):
            if msg.term == self.term and self.role is Role.FOLLOWER:
                self._start_election(now, out, transfer=True)
        return out

    # ---- roles ----------------------------------------------------------------------
    def _become_follower(self, term: int, leader: str | None, now: int, out: list[Action]) -> None:
        if term > self.term:
            self.term, self.voted_for = term, None
            out.append(SaveMeta(self.term, None))
        if self.role is Role.LEADER:
            for rid, (index, _, _) in list(self.waiters.items()):
                out.append(Complete(rid, Code.TERM_CHANGED, index))
            self.waiters.clear()
        if self.role is not Role.FOLLOWER or leader != self.leader:
            self.match_end = -1  # a new leader: nothing is known to match it yet
            self.pending_appends.clear()  # and appends queued from another are not its
        self.role = Role.FOLLOWER
        self.leader = leader
        self.transfer_to = None
        self.pre_voting = False
        self.election_deadline = now + self._election_timeout()

    def _become_leader(self, now: int, out: list[Action]) -> None:
        self.role = Role.LEADER
        self.leader_since = now
        self.last_reply = {}
        self.leader = self.id
        self.transfer_to = None
        self.watermarks = {self.term: {}}  # watermarks of older terms are dropped
        # every dispatcher starts in COMPARE from our end (S0-2)
        self.dispatchers = {p: Dispatcher(PushType.COMPARE, self.end) for p in self.peers}
        if "commit-old-term" not in self.bugs:
            # an entry of our own term: older entries commit only beneath one (figure 8)
            entry = Entry(self.end + 1, self.term, b"")
            self.log.append((entry,))
            out.append(AppendEntries((entry,)))
        self._advance_commit(out)
        for p in self.peers:
            self._dispatch(p, now, out)

    # ---- status ---------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role.value, "term": self.term, "leader": self.leader,
                "begin": self.begin, "end": self.end, "commit": self.commit,
                "watermarks": dict(self.watermarks.get(self.term, {}))
                if self.role is Role.LEADER else {}}
