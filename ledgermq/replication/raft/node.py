"""A DLedger-style Raft replica as a pure state machine.

Inputs: `step(message, now)`, `tick(now)`, `propose(data, now)`, `transfer_leadership`.
Outputs: lists of actions (see types.py for the driver contract). No sockets, clocks,
threads or files: the broker drives it with asyncio, the simulator with virtual time.

Leader side: one dispatcher per peer walking COMPARE -> TRUNCATE -> APPEND (S0-2..S0-5),
pipelined pushes with re-push and the leak check, a quorum ack checker over per-term
watermarks (S0-8). Follower side: pushes applied strictly in order, REPEATED_PUSH,
fall-behind answers, fast-forward on a gap that outlives the push timeout (S0-7), the
committed index clamped and never moving back (S0-6).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from .log import MemoryLog
from .types import (
    RESET_LOG, Action, AppendEntries, Code, Complete, Entry, Message, Push, PushResponse,
    PushType, RaftConfig, ResetLog, Role, SaveCommit, SaveMeta, Send, TimeoutNow, TruncateAfter,
    VoteRequest, VoteResponse,
)

# Known protocol bugs, switched on only by tests and `ledgermq sim --inject-bug`.
BUGS = {
    "commit-old-term": "count a quorum for an entry of an older term (Raft's figure 8)",
    "truncate-to-commit": "truncate a rejoining follower to its committed index instead "
                          "of comparing logs",
    "vote-by-current-term": "up-to-date check compares the candidate's current term, not "
                            "its last entry's term",
    "commit-past-end": "follower advances its committed index past what it holds",
}


@dataclass
class Dispatcher:
    """The leader's replication state for one peer."""

    state: PushType = PushType.COMPARE
    compare_index: int = -1
    write_index: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # first -> (last, sent)
    inflight_control: int = -1  # send time of an unanswered COMPARE/TRUNCATE, -1 if none
    reset: bool = False  # the TRUNCATE is at our begin, no match found: the peer resets
    last_push_ms: int = -10**9
    last_leak_check_ms: int = 0
    quota_second: int = -1  # the second the quota counts bytes for
    quota_used: int = 0


class RaftNode:
    def __init__(self, node_id: str, peers: list[str], config: RaftConfig | None = None, *,
                 term: int = 0, voted_for: str | None = None, log=None,
                 commit: int = -1, rng: random.Random | None = None, now: int = 0):
        self.id = node_id
        self.peers = [p for p in peers if p != node_id]
        self.cfg = config or RaftConfig()
        self.bugs = self.cfg.bugs
        self.rng = rng or random.Random()
        self.term = term
        self.voted_for = voted_for
        # a list of entries (kept in memory) or any object with MemoryLog's methods
        self.log = MemoryLog(log or []) if log is None or isinstance(log, list) else log
        self.commit = min(commit, self.end)
        self.role = Role.FOLLOWER
        self.leader: str | None = None
        self.last_heard = now
        self.election_deadline = now + self._election_timeout()
        self.votes: set[str] = set()
        self.pre_votes: set[str] = set()
        self.pre_voting = False
        self.dispatchers: dict[str, Dispatcher] = {}
        self.watermarks: dict[int, dict[str, int]] = {}  # term -> peer -> acked end
        self.waiters: dict[int, tuple[int, int, int]] = {}  # request id -> (index, term, deadline)
        self.pending_appends: dict[int, tuple[Push, int]] = {}  # follower: first -> (push, at)
        # follower: since when appends arrive past a gap (COMMIT heartbeats clear the queued
        # appends, so the gap's age is kept apart from them)
        self.gap_since: int | None = None
        self.match_end = -1  # follower: highest index known equal to the current leader's
        self.transfer_to: str | None = None
        self.transfer_started = 0
        self.leader_since = 0
        self.last_reply: dict[str, int] = {}  # leader: when each peer last answered

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

    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]:
        """Entries lo..hi inclusive that we hold."""
        return self.log.entries(lo, hi)

    @property
    def quorum(self) -> int:
        return (len(self.peers) + 1) // 2 + 1

    def _election_timeout(self) -> int:
        t = self.cfg.election_timeout_ms
        return self.rng.randrange(t, 2 * t)

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
        if isinstance(msg, VoteRequest):
            self._on_vote_request(msg, now, out)
        elif isinstance(msg, VoteResponse):
            self._on_vote_response(msg, now, out)
        elif isinstance(msg, Push):
            self._on_push(msg, now, out)
        elif isinstance(msg, PushResponse):
            self._on_push_response(msg, now, out)
        elif isinstance(msg, TimeoutNow):
            if msg.term == self.term and self.role is Role.FOLLOWER:
                self._start_election(now, out, transfer=True)
        return out

    # ---- terms and roles ------------------------------------------------------------
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
        self.role = Role.FOLLOWER
        self.leader = leader
        self.transfer_to = None
        self.pre_voting = False
        self.election_deadline = now + self._election_timeout()

    def _up_to_date(self, last_index: int, last_term: int, candidate_term: int) -> bool:
        theirs = candidate_term if "vote-by-current-term" in self.bugs else last_term
        return (theirs, last_index) >= (self.last_term, self.end)

    def _start_pre_vote(self, now: int, out: list[Action]) -> None:
        """Ask whether we could win before disturbing anyone's term (pre-vote)."""
        self.pre_voting = True
        self.pre_votes = {self.id}
        self.election_deadline = now + self._election_timeout()
        if len(self.pre_votes) >= self.quorum:
            self._start_election(now, out)
            return
        for p in self.peers:
            out.append(Send(VoteRequest(self.id, p, self.term + 1, self.end, self.last_term,
                                        pre_vote=True)))

    def _start_election(self, now: int, out: list[Action], transfer: bool = False) -> None:
        self.pre_voting = False
        self.role = Role.CANDIDATE
        self.leader = None
        self.term += 1
        self.voted_for = self.id
        self.votes = {self.id}
        self.election_deadline = now + self._election_timeout()
        out.append(SaveMeta(self.term, self.id))
        if len(self.votes) >= self.quorum:
            self._become_leader(now, out)
            return
        for p in self.peers:
            out.append(Send(VoteRequest(self.id, p, self.term, self.end, self.last_term,
                                        transfer=transfer)))

    def _on_vote_request(self, m: VoteRequest, now: int, out: list[Action]) -> None:
        if m.pre_vote:
            # grant only if we too have lost the leader: a rejoining node cannot depose
            # a healthy one
            leader_alive = self.role is Role.LEADER or (
                self.leader is not None and now - self.last_heard < self.cfg.election_timeout_ms)
            granted = (m.term > self.term and not leader_alive and
                       self._up_to_date(m.last_index, m.last_term, m.term - 1))
            out.append(Send(VoteResponse(self.id, m.src, m.term if granted else self.term,
                                         granted, pre_vote=True)))
            return
        if m.term < self.term:
            out.append(Send(VoteResponse(self.id, m.src, self.term, False)))
            return
        if m.term > self.term:
            self._become_follower(m.term, None, now, out)
        granted = (self.voted_for in (None, m.src) and
                   self._up_to_date(m.last_index, m.last_term, m.term))
        if granted:
            self.voted_for = m.src
            self.election_deadline = now + self._election_timeout()
            out.append(SaveMeta(self.term, m.src))  # durable before the answer
        out.append(Send(VoteResponse(self.id, m.src, self.term, granted)))

    def _on_vote_response(self, m: VoteResponse, now: int, out: list[Action]) -> None:
        if m.pre_vote:
            if self.pre_voting and m.granted and m.term == self.term + 1:
                self.pre_votes.add(m.src)
                if len(self.pre_votes) >= self.quorum:
                    self._start_election(now, out)
            return
        if m.term > self.term:
            self._become_follower(m.term, None, now, out)
            return
        if self.role is Role.CANDIDATE and m.term == self.term and m.granted:
            self.votes.add(m.src)
            if len(self.votes) >= self.quorum:
                self._become_leader(now, out)

    def _lost_quorum(self, now: int) -> bool:
        """Check quorum: a leader that has heard from no majority for an election timeout
        steps down, so an isolated old leader stops taking writes."""
        horizon = now - 2 * self.cfg.election_timeout_ms
        if self.leader_since > horizon:
            return False
        heard = 1 + sum(1 for p in self.peers if self.last_reply.get(p, -10**9) > horizon)
        return heard < self.quorum

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

    # ---- leader: dispatchers --------------------------------------------------------
    def _push(self, peer: str, kind: PushType, index: int, entries: tuple[Entry, ...]) -> Send:
        prev = self.entry(index - 1) if kind is PushType.APPEND else None
        prev_term = prev.term if prev else -1
        if kind is PushType.TRUNCATE and self.dispatchers[peer].reset:
            prev_term = RESET_LOG
        return Send(Push(self.id, peer, self.term, kind, index, entries, self.commit,
                         prev_term))

    def _dispatch(self, peer: str, now: int, out: list[Action],
                  housekeeping: bool = False) -> None:
        d = self.dispatchers[peer]
        if d.state in (PushType.COMPARE, PushType.TRUNCATE) and not self.log:
            if now - d.last_push_ms >= self.cfg.heartbeat_ms:  # nothing to compare yet
                d.last_push_ms = now
                out.append(self._push(peer, PushType.COMMIT, -1, ()))
            return
        if d.state in (PushType.COMPARE, PushType.TRUNCATE):
            if d.inflight_control >= 0 and now - d.inflight_control < self.cfg.heartbeat_ms:
                return
            d.inflight_control = now
            d.last_push_ms = now
            if d.state is PushType.COMPARE:
                if d.compare_index < self.begin or d.compare_index > self.end:
                    d.compare_index = self.end
                e = self.entry(d.compare_index)
                out.append(self._push(peer, PushType.COMPARE, d.compare_index,
                                      (e,) if e else ()))
            else:
                e = self.entry(d.compare_index)
                if e is None:  # compacted since we chose it: look for the meeting point again
                    self._set_state(d, PushType.COMPARE, self.end)
                    return
                out.append(self._push(peer, PushType.TRUNCATE, d.compare_index, (e,)))
            return
        # (pending is keyed in increasing order of insertion: its first key is the lowest)
        if d.write_index < self.begin or (d.pending and next(iter(d.pending)) < self.begin):
            # what it needs next is gone from our log (retention compacted it): find where
            # our logs meet; below our begin that ends in a TRUNCATE to our first entry
            self._set_state(d, PushType.COMPARE, self.end)
            return
        # APPEND: the leak check and re-pushes (on ticks), then new pushes up to
        # maxPendingSize
        if housekeeping or len(d.pending) >= self.cfg.max_pending_size:
            mark = self.watermarks.get(self.term, {}).get(peer, -1)
            if len(d.pending) >= self.cfg.max_pending_size or \
                    now - d.last_leak_check_ms > self.cfg.check_leak_interval_ms:
                for first in [f for f, (last, _) in d.pending.items() if last <= mark]:
                    del d.pending[first]
                d.last_leak_check_ms = now
            for first, (last, sent) in sorted(d.pending.items()):
                if now - sent >= self.cfg.max_push_timeout_ms:
                    d.pending[first] = (last, now)
                    d.last_push_ms = now
                    out.append(self._push(peer, PushType.APPEND, first,
                                          self.entries(first, last)))
        while d.write_index <= self.end and len(d.pending) < self.cfg.max_pending_size:
            last = self._push_end(d.write_index,
                                  min(self.end, d.write_index + self.cfg.max_batch_entries - 1))
            if self._over_quota(peer, d, last, now):
                break
            d.pending[d.write_index] = (last, now)
            d.last_push_ms = now
            out.append(self._push(peer, PushType.APPEND, d.write_index,
                                  self.entries(d.write_index, last)))
            d.write_index = last + 1
        if now - d.last_push_ms >= self.cfg.heartbeat_ms:
            d.last_push_ms = now  # a stand-alone COMMIT doubles as the heartbeat
            out.append(self._push(peer, PushType.COMMIT, -1, ()))

    def _push_end(self, first: int, last: int) -> int:
        """The last entry of a push from `first` (at most `last`) whose entries stay within
        max_push_bytes, so that a push fits a frame however large the entries are."""
        base = self.log.bytes_after(first - 1)
        if base - self.log.bytes_after(last) <= self.cfg.max_push_bytes:
            return last
        lo, hi = first, last  # the answer lies in [lo, hi): bytes grow with the last index
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if base - self.log.bytes_after(mid) <= self.cfg.max_push_bytes:
                lo = mid
            else:
                hi = mid
        return lo

    def _over_quota(self, peer: str, d: Dispatcher, last: int, now: int) -> bool:
        """S0-5: a peer further behind than peer_push_throttle_point gets at most
        peer_push_quota bytes a second, so catching it up cannot starve the others."""
        mark = self.watermarks.get(self.term, {}).get(peer, -1)
        if self.log.bytes_after(mark) <= self.cfg.peer_push_throttle_point:
            return False
        second = now // 1000
        if second != d.quota_second:
            d.quota_second, d.quota_used = second, 0
        size = self.log.bytes_after(d.write_index - 1) - self.log.bytes_after(last)
        if d.quota_used + size > self.cfg.peer_push_quota and d.quota_used > 0:
            return True
        d.quota_used += size
        return False

    def _set_state(self, d: Dispatcher, state: PushType, index: int,
                   reset: bool = False) -> None:
        d.state = state
        d.reset = reset
        d.inflight_control = -1
        d.pending.clear()
        if state is PushType.APPEND:
            d.write_index = index + 1
        else:
            d.compare_index = index

    def _on_push_response(self, m: PushResponse, now: int, out: list[Action]) -> None:
        if m.term > self.term:
            self._become_follower(m.term, None, now, out)
            return
        if self.role is not Role.LEADER or m.term != self.term or m.src not in self.dispatchers:
            return
        self.last_reply[m.src] = now
        d = self.dispatchers[m.src]
        if m.kind is PushType.COMPARE and d.state is PushType.COMPARE and m.index == d.compare_index:
            self._on_compare(d, m, now, out)
        elif m.kind is PushType.TRUNCATE and d.state is PushType.TRUNCATE:
            if m.code is Code.SUCCESS and m.index == d.compare_index:
                self._ack(m.src, m.index, now, out)
                self._set_state(d, PushType.APPEND, m.index)
            else:
                self._set_state(d, PushType.COMPARE, self.end)
        elif m.kind is PushType.APPEND and d.state is PushType.APPEND:
            if m.code is Code.SUCCESS:
                d.pending.pop(m.index, None)
                self._ack(m.src, m.last, now, out)
            elif m.code is Code.INCONSISTENT_STATE:
                self._set_state(d, PushType.COMPARE, min(self.end, m.end))
            # REPEATED_PUSH: the first copy is on its way; nothing to do
        elif m.kind is PushType.COMMIT and d.state is PushType.APPEND and (
                m.code is Code.INCONSISTENT_STATE or
                (not d.pending and m.end < d.write_index - 1)):
            # a gap on its side, or it holds less than it acknowledged with nothing on the
            # way (its disk lost entries): walk back to what it really holds
            self._set_state(d, PushType.COMPARE, min(self.end, m.end))
        self._dispatch(m.src, now, out)

    def _on_compare(self, d: Dispatcher, m: PushResponse, now: int, out: list[Action]) -> None:
        """Walk back to the last entry both logs share (S0-3)."""
        if "truncate-to-commit" in self.bugs:
            self._set_state(d, PushType.TRUNCATE, max(min(self.commit, self.end), self.begin))
            return
        if m.code is Code.SUCCESS:
            self._set_state(d, PushType.TRUNCATE, m.index)
        elif m.index < m.begin and self.begin <= m.begin - 1 <= self.end:
            # below what it keeps: it compacted only committed entries, which are ours too,
            # so our logs agree up to its begin - 1 (a reset there keeps its commit <= end)
            self._set_state(d, PushType.TRUNCATE, m.begin - 1)
        elif m.end < self.begin or m.begin > self.end or m.index < m.begin:
            # disjoint: start from our begin
            self._set_state(d, PushType.TRUNCATE, self.begin, reset=self.begin > 0)
        elif m.index > m.end:
            d.compare_index = m.end  # the follower holds less: compare at its end
            d.inflight_control = -1
        else:
            d.compare_index = m.index - 1
            d.inflight_control = -1
            if d.compare_index < self.begin:  # no match down to our begin
                self._set_state(d, PushType.TRUNCATE, self.begin, reset=self.begin > 0)

    def _ack(self, peer: str, index: int, now: int, out: list[Action]) -> None:
        marks = self.watermarks.setdefault(self.term, {})
        if index > marks.get(peer, -1):
            marks[peer] = index
            self._advance_commit(out)
            self._maybe_send_timeout_now(now, out)

    def _advance_commit(self, out: list[Action]) -> None:
        """The quorum ack checker (S0-8): the largest index a majority holds."""
        marks = self.watermarks.get(self.term, {})
        acked = sorted([self.end] + [marks.get(p, -1) for p in self.peers], reverse=True)
        index = acked[self.quorum - 1]
        if index <= self.commit:
            return
        e = self.entry(index)
        if e is None or (e.term != self.term and "commit-old-term" not in self.bugs):
            return
        self.commit = index
        out.append(SaveCommit(index))
        for rid, (i, term, _) in list(self.waiters.items()):
            if i <= index:
                del self.waiters[rid]
                code = Code.SUCCESS if self.entry(i) and self.entry(i).term == term \
                    else Code.TERM_CHANGED
                out.append(Complete(rid, code, i, term))

    def _expire_waiters(self, now: int, out: list[Action]) -> None:
        for rid, (i, term, deadline) in list(self.waiters.items()):
            if now >= deadline:
                del self.waiters[rid]
                out.append(Complete(rid, Code.WAIT_QUORUM_ACK_TIMEOUT, i, term))

    def _maybe_send_timeout_now(self, now: int, out: list[Action]) -> None:
        t = self.transfer_to
        if t and self.caught_up(t):
            out.append(Send(TimeoutNow(self.id, t, self.term)))

    # ---- follower: the entry handler -------------------------------------------------
    def _respond(self, m: Push, code: Code, out: list[Action], last: int | None = None) -> None:
        out.append(Send(PushResponse(self.id, m.src, self.term, m.kind, m.index,
                                     m.index if last is None else last, code, self.begin,
                                     self.end)))

    def _on_push(self, m: Push, now: int, out: list[Action]) -> None:
        if m.term < self.term:
            out.append(Send(PushResponse(self.id, m.src, self.term, m.kind, m.index, m.index,
                                         Code.EXPIRED_TERM, self.begin, self.end)))
            return
        if m.term > self.term or self.role is not Role.FOLLOWER or self.leader != m.src:
            self._become_follower(m.term, m.src, now, out)
        self.last_heard = now
        self.election_deadline = now + self._election_timeout()
        if m.kind is PushType.APPEND:
            self._on_append(m, now, out)
        else:
            # COMPARE / TRUNCATE / COMMIT go first and clear queued appends (S0-7)
            self.pending_appends.clear()
            stale_gap = self.gap_since is not None and \
                now - self.gap_since >= self.cfg.max_push_timeout_ms
            if m.kind is not PushType.COMMIT or stale_gap:
                self.gap_since = None
            if m.kind is PushType.COMMIT and stale_gap:
                # heartbeats come faster than the push timeout: without this a follower
                # missing entries (a lost disk) would clear its queue and wait for ever
                self._respond(m, Code.INCONSISTENT_STATE, out)
            elif m.kind is PushType.COMPARE:
                mine = self.entry(m.index)
                ok = bool(m.entries) and mine == m.entries[0]
                if ok:
                    self.match_end = max(self.match_end, m.index)
                self._respond(m, Code.SUCCESS if ok else Code.INCONSISTENT_STATE, out)
            elif m.kind is PushType.TRUNCATE:
                self._truncate(m, out)
            else:
                self._respond(m, Code.SUCCESS, out)
        self._follow_commit(m.commit, out)

    def _truncate(self, m: Push, out: list[Action]) -> None:
        """Make the entry at m.index the leader's (S0-4). Entries after it are dropped only
        if that entry conflicted: a matching tail is left for APPEND to confirm or replace,
        so an entry we already committed is never removed by a late TRUNCATE. An entry below
        our begin was compacted here, so committed: ours already. With RESET_LOG (the
        leader's first entry after compaction, and nothing shows our entries before it are
        the leader's), a log without that very entry restarts with it alone."""
        e = m.entries[0]
        if self.log and e.index < self.begin:
            pass
        elif m.prev_term == RESET_LOG and self.entry(e.index) != e:
            self.log.reset(e)
            out.append(ResetLog(e))
        elif self.log and self.begin <= e.index <= self.end + 1:
            if self.entry(e.index) != e:
                if e.index <= self.end:
                    out.append(TruncateAfter(e.index - 1))
                    self.log.truncate_after(e.index - 1)
                self.log.append((e,))
                out.append(AppendEntries((e,)))
        else:
            self.log.reset(e)
            out.append(ResetLog(e))
        self.match_end = e.index
        self._respond(m, Code.SUCCESS, out)

    def _on_append(self, m: Push, now: int, out: list[Action]) -> None:
        last = m.index + len(m.entries) - 1
        if m.index in self.pending_appends:
            self._respond(m, Code.REPEATED_PUSH, out, last)
            return
        if m.index <= self.end + 1:
            self.gap_since = None
            self._apply_append(m, out)
            while self.end + 1 in self.pending_appends:
                push, _ = self.pending_appends.pop(self.end + 1)
                self._apply_append(push, out)
            return
        self.pending_appends[m.index] = (m, now)  # a gap: wait for the missing push
        if self.gap_since is None:
            self.gap_since = now

    def _apply_append(self, m: Push, out: list[Action]) -> None:
        """Append a push that starts at or before our end + 1: entries we hold must be the
        leader's (else INCONSISTENT_STATE, or a conflicting uncommitted tail is replaced);
        an entry at index - 1 of another term means our logs diverge before the push."""
        last = m.index + len(m.entries) - 1
        prev = self.entry(m.index - 1)
        if m.index - 1 >= self.begin and (prev is None or prev.term != m.prev_term):
            self._respond(m, Code.INCONSISTENT_STATE, out, last)
            return
        new: list[Entry] = []
        for e in m.entries:
            if e.index < self.begin:
                continue  # committed and compacted here: ours already
            mine = self.entry(e.index)
            if mine is None:
                new.append(e)
            elif mine != e:
                if e.index <= self.commit:  # never rewrite what we committed
                    self._respond(m, Code.INCONSISTENT_STATE, out, last)
                    return
                out.append(TruncateAfter(e.index - 1))
                self.log.truncate_after(e.index - 1)
                new.append(e)
        if new:
            self.log.append(new)
            out.append(AppendEntries(tuple(new)))
        self.match_end = max(self.match_end, last)
        self._respond(m, Code.SUCCESS, out, last)

    def _check_gaps(self, now: int, out: list[Action]) -> None:
        """Fast-forward: a gap before queued appends that outlives the push timeout means
        the leader must compare again."""
        if not self.pending_appends or self.end + 1 in self.pending_appends:
            return
        stale = [i for i, (_, at) in self.pending_appends.items()
                 if now - at >= self.cfg.max_push_timeout_ms]
        if stale:
            push, _ = self.pending_appends.pop(min(stale))
            self._respond(push, Code.INCONSISTENT_STATE, out,
                          push.index + len(push.entries) - 1)

    def _follow_commit(self, leader_commit: int, out: list[Action]) -> None:
        """Take the leader's committed index, clamped to what we hold that matches the
        leader, never moving back (S0-6)."""
        if "commit-past-end" in self.bugs:
            target = leader_commit
        else:
            target = min(leader_commit, self.end, self.match_end)
        if target > self.commit:
            self.commit = target
            out.append(SaveCommit(target))

    # ---- status ---------------------------------------------------------------------
    def status(self) -> dict:
        return {"id": self.id, "role": self.role.value, "term": self.term, "leader": self.leader,
                "begin": self.begin, "end": self.end, "commit": self.commit,
                "watermarks": dict(self.watermarks.get(self.term, {}))
                if self.role is Role.LEADER else {}}
