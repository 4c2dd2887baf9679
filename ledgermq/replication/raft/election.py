"""Elections: pre-vote, votes, and the leader's check that a majority still hears it.

A node whose election deadline passes first asks for pre-votes at term + 1, changing
nothing; only with a majority of them does it raise its term and ask for votes, so a node
rejoining after a partition cannot depose a healthy leader. A vote is granted once a term,
to a candidate whose last entry is at least as up to date as ours, and is made durable
(SaveMeta) before the answer goes out.

A node whose disk lost entries it may have acknowledged (`promised`: the last entry of the
log it held) still votes as if it held them: it grants only a candidate at least as up to
date as that log, and does not campaign until a leader has refilled it past it. Its lost
entries may have been committed by a quorum it was part of; Raft's proof that every
leader holds them rests on each voter of that quorum holding them, so the promise is what
keeps the quorums intersecting (PAR, FAST'18; etcd-io/raft leaves this to the operator:
a member that lost its data rejoins as a new member). Once its log passes the promise
the ordinary rule is the same rule.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

from .messages import Action, RaftConfig, Role, SaveMeta, Send, VoteRequest, VoteResponse


class Elections:
    """Mixed into RaftNode."""

    votes: set[str]
    pre_votes: set[str]
    pre_voting: bool
    # RaftNode's state and log helpers used here
    id: str
    peers: list[str]
    cfg: RaftConfig
    bugs: frozenset[str]
    rng: random.Random
    term: int
    voted_for: str | None
    promised: tuple[int, int] | None
    role: Role
    leader: str | None
    last_heard: int
    election_deadline: int
    leader_since: int
    last_reply: dict[str, int]

    if TYPE_CHECKING:
        @property
        def end(self) -> int: ...
        @property
        def last_term(self) -> int: ...
        @property
        def quorum(self) -> int: ...
        def _become_follower(self, term: int, leader: str | None, now: int,
                             out: list[Action]) -> None: ...
        def _become_leader(self, now: int, out: list[Action]) -> None: ...

    def _election_timeout(self) -> int:
        t = self.cfg.election_timeout_ms
        return self.rng.randrange(t, 2 * t)

    def _vote_floor(self) -> tuple[int, int]:
        """(last term, last index) a candidate must reach for our vote: our log's, or the
        log we held before our disk lost its tail, while ours is still behind that."""
        mine = (self.last_term, self.end)
        if self.promised is not None and mine >= self.promised:
            self.promised = None  # refilled past what we lost: the promise is kept
        if self.promised is None or "vote-with-lost-entries" in self.bugs:
            return mine
        return self.promised

    def _up_to_date(self, last_index: int, last_term: int, candidate_term: int) -> bool:
        theirs = candidate_term if "vote-by-current-term" in self.bugs else last_term
        return (theirs, last_index) >= self._vote_floor()

    def _start_pre_vote(self, now: int, out: list[Action]) -> None:
        """Ask whether we could win before disturbing anyone's term (pre-vote)."""
        if self._vote_floor() > (self.last_term, self.end):
            # our own vote fails our promise: wait for a leader to repair us
            self.election_deadline = now + self._election_timeout()
            return
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
        if self._vote_floor() > (self.last_term, self.end):
            return  # (a transfer to a node still being repaired)
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
            elif not m.granted and m.term > self.term:
                # refused by a node of a later term (etcd does the same): take its term,
                # so our next pre-vote is for a term it can grant. Without this, a node
                # holding the longest log but an older term can never win while the
                # others cannot win without it (a damaged node's promise refuses them)
                self._become_follower(m.term, None, now, out)
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
