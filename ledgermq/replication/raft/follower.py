"""The follower's side of replication: DLedger's entry handler.

Pushes are applied strictly in order: an APPEND past a gap waits in `pending_appends`
(a copy of one already waiting is answered REPEATED_PUSH) until the missing push arrives,
or until the gap outlives max_push_timeout_ms, when the follower answers
INCONSISTENT_STATE so that the leader compares again (fast-forward, S0-7). COMPARE,
TRUNCATE and COMMIT go first; COMPARE and TRUNCATE clear the queue, while a COMMIT (the
heartbeat) keeps it, so the one missing push completes it. The committed index follows the
leader's, clamped to what this log holds and is known to share with the leader
(`match_end`), and never moves back (S0-6).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .log import RaftLog
from .messages import (
    RESET_LOG, Action, AppendEntries, Code, Entry, Push, PushResponse, PushType, RaftConfig,
    ResetLog, Role, SaveCommit, Send, TruncateAfter,
)


class FollowerLog:
    """Mixed into RaftNode; answers pushes in any role (a push of a term at least ours
    makes us its sender's follower first)."""

    pending_appends: dict[int, tuple[Push, int]]  # first index -> (push, when it came)
    match_end: int  # highest index known equal to the current leader's
    # RaftNode's state and log helpers used here
    id: str
    cfg: RaftConfig
    bugs: frozenset[str]
    term: int
    role: Role
    leader: str | None
    log: RaftLog
    commit: int
    last_heard: int
    election_deadline: int

    if TYPE_CHECKING:
        @property
        def begin(self) -> int: ...
        @property
        def end(self) -> int: ...
        def entry(self, index: int) -> Entry | None: ...
        def term_at(self, index: int) -> int | None: ...
        def _election_timeout(self) -> int: ...
        def _become_follower(self, term: int, leader: str | None, now: int,
                             out: list[Action]) -> None: ...

    def _respond(self, m: Push, code: Code, out: list[Action], last: int | None = None) -> None:
        out.append(Send(PushResponse(self.id, m.src, self.term, m.kind, m.index,
                                     m.index if last is None else last, code, self.begin,
                                     self.end)))

    def _on_push(self, m: Push, now: int, out: list[Action]) -> None:
        if m.term < self.term:
            self._respond(m, Code.EXPIRED_TERM, out)
            return
        if m.term > self.term or self.role is not Role.FOLLOWER or self.leader != m.src:
            self._become_follower(m.term, m.src, now, out)
        self.last_heard = now
        self.election_deadline = now + self._election_timeout()
        if m.kind is PushType.APPEND:
            self._on_append(m, now, out)
        else:
            self._on_control(m, now, out)
        self._follow_commit(m.commit, out)

    def _on_control(self, m: Push, now: int, out: list[Action]) -> None:
        """COMPARE / TRUNCATE / COMMIT go first; COMPARE and TRUNCATE start the leader's
        walk afresh, so the appends queued for the old one are dropped (S0-7)."""
        if m.kind is not PushType.COMMIT:
            self.pending_appends.clear()
        if m.kind is PushType.COMPARE:
            mine = self.entry(m.index)
            ok = bool(m.entries) and mine == m.entries[0]
            if ok:
                self.match_end = max(self.match_end, m.index)
            self._respond(m, Code.SUCCESS if ok else Code.INCONSISTENT_STATE, out)
        elif m.kind is PushType.TRUNCATE:
            self._truncate(m, out)
        else:
            self._respond(m, Code.SUCCESS, out)

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
            self._apply_append(m, out)
            while self.end + 1 in self.pending_appends:
                push, _ = self.pending_appends.pop(self.end + 1)
                self._apply_append(push, out)
            return
        self.pending_appends[m.index] = (m, now)  # a gap: wait for the missing push

    def _apply_append(self, m: Push, out: list[Action]) -> None:
        """Append a push that starts at or before our end + 1: a conflicting tail is
        replaced by the leader's entries (committed ones too, see below); an entry at
        index - 1 of another term means our logs diverge before the push."""
        last = m.index + len(m.entries) - 1
        if m.index - 1 >= self.begin and self.term_at(m.index - 1) != m.prev_term:
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
                if e.index <= self.commit and last < self.commit:
                    # replacing it would leave our log short of our commit: wait for a
                    # push that reaches it
                    self._respond(m, Code.INCONSISTENT_STATE, out, last)
                    return
                # A committed entry of ours differs only if our disk damaged it unseen
                # (a message's body CRC does not cover its topic and properties): the
                # leader of our term holds every committed entry, so its copy is right.
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
