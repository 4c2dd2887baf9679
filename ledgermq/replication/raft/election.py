"""Elections: pre-vote, votes, and the leader's check that a majority still hears it.

A node whose election deadline passes first asks for pre-votes at term + 1, changing
nothing; only with a majority of them does it raise its term and ask for votes, so a node
rejoining after a partition cannot depose a healthy leader. A vote is granted once a term,
to a candidate whose last entry is at least as up to date as ours, and is made durable
(SaveMeta) before the answer goes out.
"""
from __future__ import annotations

from .types import Action, Role, SaveMeta, Send, VoteRequest, VoteResponse


class Elections:
    """Mixed into RaftNode."""

    votes: set[str]
    pre_votes: set[str]
    pre_voting: bool

    def _election_timeout(self) -> int:
        t = self.cfg.election_timeout_ms
        return self.rng.randrange(t, 2 * t)

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
