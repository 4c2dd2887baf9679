"""The leader's side of replication: what it pushes each peer, how it reads their answers,
and when an entry commits.

One Dispatcher per peer (progress.py) walks COMPARE -> TRUNCATE -> APPEND (S0-2..S0-5);
APPEND pushes are pipelined up to max_pending_size, re-pushed after max_push_timeout_ms
and bounded by max_push_bytes and, for a peer far behind, by a byte quota a second.
Answers raise per-term watermarks; the quorum ack checker commits the largest index a
majority holds, and only an entry of the leader's own term (S0-8, Raft's figure 8).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .log import RaftLog
from .messages import (
    RESET_LOG, Action, Code, Complete, Entry, Push, PushResponse, PushType, RaftConfig, Role,
    SaveCommit, Send, TimeoutNow,
)
from .progress import Dispatcher


class LeaderReplication:
    """Mixed into RaftNode; runs only while it leads (its dispatchers are made afresh by
    `_become_leader`)."""

    dispatchers: dict[str, Dispatcher]
    watermarks: dict[int, dict[str, int]]  # term -> peer -> acked end
    waiters: dict[int, tuple[int, int, int]]  # request id -> (index, term, deadline)
    # RaftNode's state and log helpers used here
    id: str
    peers: list[str]
    cfg: RaftConfig
    bugs: frozenset[str]
    term: int
    role: Role
    log: RaftLog
    commit: int
    last_reply: dict[str, int]
    transfer_to: str | None

    if TYPE_CHECKING:
        @property
        def begin(self) -> int: ...
        @property
        def end(self) -> int: ...
        @property
        def quorum(self) -> int: ...
        def entry(self, index: int) -> Entry | None: ...
        def term_at(self, index: int) -> int | None: ...
        def entries(self, lo: int, hi: int) -> tuple[Entry, ...]: ...
        def caught_up(self, peer: str) -> bool: ...
        def _become_follower(self, term: int, leader: str | None, now: int,
                             out: list[Action]) -> None: ...

    # ---- pushes -----------------------------------------------------------------------
    def _push(self, peer: str, kind: PushType, index: int, entries: tuple[Entry, ...]) -> Send:
        prev = self.term_at(index - 1) if kind is PushType.APPEND else None
        prev_term = -1 if prev is None else prev
        if kind is PushType.TRUNCATE and self.dispatchers[peer].reset:
            prev_term = RESET_LOG
        return Send(Push(self.id, peer, self.term, kind, index, entries, self.commit,
                         prev_term))

    def _dispatch(self, peer: str, now: int, out: list[Action],
                  housekeeping: bool = False) -> None:
        """Send `peer` what its dispatcher's state calls for; `housekeeping` (on ticks) adds
        the leak check and re-pushes."""
        d = self.dispatchers[peer]
        if d.state is PushType.APPEND:
            self._dispatch_appends(peer, d, now, out, housekeeping)
        elif not self.log:
            self._heartbeat_if_due(peer, d, now, out)  # nothing to compare yet
        else:
            self._dispatch_control(peer, d, now, out)

    def _heartbeat_if_due(self, peer: str, d: Dispatcher, now: int, out: list[Action]) -> None:
        if now - d.last_push_ms >= self.cfg.heartbeat_ms:
            d.last_push_ms = now  # a stand-alone COMMIT doubles as the heartbeat
            out.append(self._push(peer, PushType.COMMIT, -1, ()))

    def _dispatch_control(self, peer: str, d: Dispatcher, now: int, out: list[Action]) -> None:
        """One COMPARE or TRUNCATE at a time, sent again after a heartbeat unanswered."""
        if d.inflight_control >= 0 and now - d.inflight_control < self.cfg.heartbeat_ms:
            return
        d.inflight_control = now
        d.last_push_ms = now
        if d.state is PushType.COMPARE:
            if d.compare_index < self.begin or d.compare_index > self.end:
                d.compare_index = self.end
            e = self.entry(d.compare_index)
            out.append(self._push(peer, PushType.COMPARE, d.compare_index, (e,) if e else ()))
            return
        e = self.entry(d.compare_index)
        if e is None:  # compacted since we chose it: look for the meeting point again
            d.set_state(PushType.COMPARE, self.end)
            return
        out.append(self._push(peer, PushType.TRUNCATE, d.compare_index, (e,)))

    def _dispatch_appends(self, peer: str, d: Dispatcher, now: int, out: list[Action],
                          housekeeping: bool) -> None:
        begin, end = self.log.begin, self.log.end  # (read once: after every ack)
        # (pending is keyed in increasing order of insertion: its first key is the lowest)
        if d.write_index < begin or (d.pending and next(iter(d.pending)) < begin):
            # what it needs next is gone from our log (retention compacted it): find where
            # our logs meet; below our begin that ends in a TRUNCATE to our first entry
            d.set_state(PushType.COMPARE, end)
            return
        if housekeeping or len(d.pending) >= self.cfg.max_pending_size:
            self._repush_overdue(peer, d, now, out)
        while d.write_index <= end and len(d.pending) < self.cfg.max_pending_size:
            last = self._push_end(d.write_index,
                                  min(end, d.write_index + self.cfg.max_batch_entries - 1))
            if self._over_quota(peer, d, last, now):
                break
            d.pending[d.write_index] = (last, now)
            d.last_push_ms = now
            out.append(self._push(peer, PushType.APPEND, d.write_index,
                                  self.entries(d.write_index, last)))
            d.write_index = last + 1
        self._heartbeat_if_due(peer, d, now, out)

    def _repush_overdue(self, peer: str, d: Dispatcher, now: int, out: list[Action]) -> None:
        """The leak check (when the pipeline is full or its interval is up), then every
        push unanswered for max_push_timeout_ms goes again."""
        if len(d.pending) >= self.cfg.max_pending_size or \
                now - d.last_leak_check_ms > self.cfg.check_leak_interval_ms:
            d.forget_acked(self.watermarks.get(self.term, {}).get(peer, -1), now)
        for first, (last, sent) in sorted(d.pending.items()):
            if now - sent >= self.cfg.max_push_timeout_ms:
                d.pending[first] = (last, now)
                d.last_push_ms = now
                out.append(self._push(peer, PushType.APPEND, first, self.entries(first, last)))

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
        size = self.log.bytes_after(d.write_index - 1) - self.log.bytes_after(last)
        return not d.take_quota(now, size, self.cfg.peer_push_quota)

    # ---- answers ----------------------------------------------------------------------
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
                d.set_state(PushType.APPEND, m.index)
            else:
                d.set_state(PushType.COMPARE, self.end)
        elif m.kind is PushType.APPEND and d.state is PushType.APPEND:
            if m.code is Code.SUCCESS:
                d.pending.pop(m.index, None)
                self._ack(m.src, m.last, now, out)
            elif m.code is Code.INCONSISTENT_STATE:
                d.set_state(PushType.COMPARE, min(self.end, m.end))
            # REPEATED_PUSH: the first copy is on its way; nothing to do
        elif m.kind is PushType.COMMIT and d.state is PushType.APPEND and (
                m.code is Code.INCONSISTENT_STATE or
                (not d.pending and m.end < d.write_index - 1)):
            # a gap on its side, or it holds less than it acknowledged with nothing on the
            # way (its disk lost entries): walk back to what it really holds
            d.set_state(PushType.COMPARE, min(self.end, m.end))
        self._dispatch(m.src, now, out)

    def _on_compare(self, d: Dispatcher, m: PushResponse, now: int,
                    out: list[Action]) -> None:
        """Walk back to the last entry both logs share (S0-3)."""
        if "truncate-to-commit" in self.bugs:
            d.set_state(PushType.TRUNCATE, max(min(self.commit, self.end), self.begin))
            return
        if m.code is Code.SUCCESS and m.index == m.end:
            # the match is its last entry: nothing to cut, append from there (DLedger's
            # shortcut; it saves a TRUNCATE round trip on every new leader's first word)
            d.set_state(PushType.APPEND, m.index)
            self._ack(m.src, m.index, now, out)
        elif m.code is Code.SUCCESS:
            d.set_state(PushType.TRUNCATE, m.index)
        elif m.index < m.begin and self.begin <= m.begin - 1 <= self.end:
            # below what it keeps: it compacted only committed entries, which are ours too,
            # so our logs agree up to its begin - 1 (a reset there keeps its commit <= end)
            d.set_state(PushType.TRUNCATE, m.begin - 1)
        elif m.end < self.begin or m.begin > self.end or m.index < m.begin:
            # disjoint: start from our begin
            d.set_state(PushType.TRUNCATE, self.begin, reset=self.begin > 0)
        elif m.index > m.end:
            d.compare_at(m.end)  # the follower holds less: compare at its end
        else:
            d.compare_at(m.index - 1)
            if d.compare_index < self.begin:  # no match down to our begin
                d.set_state(PushType.TRUNCATE, self.begin, reset=self.begin > 0)

    # ---- commit -----------------------------------------------------------------------
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
        index_term = self.term_at(index)
        if index_term is None or (index_term != self.term and
                                  "commit-old-term" not in self.bugs):
            return
        self.commit = index
        out.append(SaveCommit(index))
        for rid, (i, term, _) in list(self.waiters.items()):
            if i <= index:
                del self.waiters[rid]
                code = Code.SUCCESS if self.term_at(i) == term else Code.TERM_CHANGED
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
