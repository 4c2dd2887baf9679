"""DLedger mode: the broker drives a RaftNode with asyncio, over its own peer port
(raftio's driver); the Raft log is the commit log itself (raft_log.py). Committed entries
move the store's dispatch bound, so consumers only ever see committed messages.

The leader's appends of one loop iteration, back to back in the commit log, become one
Raft entry: pipelined single sends then cost the replicas one index record, one copy
and one acknowledgement per iteration rather than per message.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Callable

from ..peer_auth.core import PeerAuth
from ..remoting.tls import DISABLED, Tls
from ..replication.raft import Code, Complete, RaftConfig, Role
from ..runtime.clock import mono_ms
from ..store import MessageStore, StoreError
from .dledger_log import StoreRaftLog
from .raft import RaftDriver, RaftMeta, parse_peers

log = logging.getLogger(__name__)

__all__ = ["DLedgerDriver", "parse_peers"]


class DLedgerDriver(RaftDriver):
    LINK = "DLedger peer port"
    TRANSFER_RETRY_MS = 1000
    MAX_ENTRY_BYTES = 1 << 20  # appends are gathered into one entry up to this size
    STATUS_LOG_MS = 3000  # DLedger's period for the leader's watermark line

    def __init__(self, store: MessageStore, self_id: str, peers: dict[str, str],
                 directory: Path, on_role_change: Callable[[Role], None],
                 config: RaftConfig | None = None,
                 preferred_leader: Callable[[], str] = lambda: "",
                 status_log_ms: int = STATUS_LOG_MS, auth: PeerAuth | None = None,
                 tls: Tls = DISABLED):
        if self_id not in peers:
            raise ValueError(f"dLegerSelfId {self_id} is not in dLegerPeers {sorted(peers)}")
        self.store = store
        self.dir, self.config = Path(directory), config or RaftConfig()
        raft_log = self._open_log()
        super().__init__(self_id, peers, RaftMeta(directory), raft_log, auth, tls=tls)
        self.node = self.raft = self.core = self.new_node(self.config)
        self.on_role_change = on_role_change
        self.preferred_leader = preferred_leader  # read at each tick: an operator may move it
        self._transfer_tried = -self.TRANSFER_RETRY_MS
        self._replicate_scheduled = False
        self._staged: list[asyncio.Future] = []  # appends waiting to become one entry
        self._staged_start = self._staged_end = 0
        self.status_log_ms = status_log_ms
        self._status_logged = mono_ms()

    def _open_log(self) -> StoreRaftLog:
        raft_log = StoreRaftLog(self.store, self.dir)
        # bytes the commit log holds past the last raft entry were never replicated
        if self.store.commitlog.max_offset > raft_log.log_end:
            try:
                self.store.truncate(raft_log.log_end)
            except BaseException:
                raft_log.close()
                raise
        return raft_log

    # ---- a write the disk refused (RaftDriver.persist_failed) ------------------------
    persist_errors = (OSError, StoreError)

    def _reopen(self) -> None:
        """What a restart reads, again: entries without a record and bytes past the last
        one are cut (which itself needs a little room on the disk)."""
        fresh = self._open_log()
        self._close_quietly(self.log)
        self.log, self.meta = fresh, RaftMeta(self.dir)
        self.node = self.raft = self.core = self.new_node(self.config)

    @property
    def committed_end(self) -> int:
        c = self.node.commit
        return self.log.end_of(c) if c >= self.log.begin else self.store.commitlog.min_offset

    async def start(self) -> None:
        await super().start()
        self.store.set_dispatch_bound(self.committed_end)

    def ticked(self, now: int) -> None:
        self._log_status_if_due(now)
        self._hand_over_if_due(now)

    def _log_status_if_due(self, now: int) -> None:
        """S0-8: the leader's periodic line operators watch replication by (DLedger's
        QuorumAckChecker prints the same): a watermark that stays behind `ledgerEnd` is a
        follower that does not keep up; its own watermark is its end."""
        if now - self._status_logged < self.status_log_ms:
            return
        self._status_logged = now
        if not self.is_leader:
            return
        st = self.node.status()
        marks = {**st["watermarks"], self.self_id: st["end"]}
        shown = ", ".join(f"{p}: {marks.get(p, -1)}" for p in sorted(self.peers))
        log.info("dledger %s [LEADER] term=%d ledgerBegin=%d ledgerEnd=%d committed=%d "
                 "watermarks={%s}", self.self_id, st["term"], st["begin"], st["end"],
                 st["commit"], shown)

    def _hand_over_if_due(self, now: int) -> None:
        """RocketMQ's preferred leader: a leader that is not it hands over once the
        preferred node holds the whole log (so writes pause only for the hand-over)."""
        p, node = self.preferred_leader(), self.node
        if not p or p == self.self_id or not self.is_leader or node.transfer_to is not None:
            return
        if now - self._transfer_tried >= self.TRANSFER_RETRY_MS and node.caught_up(p):
            self._transfer_tried = now
            log.info("dledger %s hands leadership to the preferred leader %s", self.self_id, p)
            self.execute(node.transfer_leadership(p, now))

    def committed(self, index: int) -> None:
        self.store.set_dispatch_bound(self.committed_end)

    def role_changed(self, role: Role) -> None:
        self.on_role_change(role)

    # ---- client appends -------------------------------------------------------------
    def propose_range(self, start: int, end: int) -> asyncio.Future:
        """Replicate the commit-log bytes [start, end) this leader just appended. The future
        gets the core's Complete (SUCCESS once a quorum holds them). Ranges appended in one
        loop iteration travel as one entry, in the push that iteration ends with."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._staged and (start != self._staged_end or
                             end - self._staged_start > self.MAX_ENTRY_BYTES):
            # not back to back, or too big together: the staged range goes on its own
            self._propose_staged()
            if self.store.commitlog.max_offset < end:  # it was refused, and cut with ours
                fut.set_result(Complete(-1, Code.NOT_LEADER))
                return fut
        if not self._staged:
            self._staged_start = start
        self._staged.append(fut)
        self._staged_end = end
        if not self._replicate_scheduled:  # appends of one loop iteration share a push
            self._replicate_scheduled = True
            loop.call_soon(self._replicate)
        return fut

    def _propose_staged(self) -> None:
        futs, self._staged = self._staged, []
        if not futs:
            return
        start, end = self._staged_start, self._staged_end
        rid = self.next_request_id()
        self.waiters[rid] = futs
        if self.store.commitlog.max_offset < end or self.halted:  # cut under us (a role
            self.complete(Complete(rid, Code.NOT_LEADER))  # change), or to be cut (reload)
            return
        data = self.log.span(start, end)  # views: the push sends them without a copy
        self.execute(self.node.propose(rid, data, mono_ms(), dispatch=False))
        refused = futs[0].done() and futs[0].result().code is not Code.SUCCESS
        if refused and self.log.log_end <= start < self.store.commitlog.max_offset:
            self.store.truncate(start)  # not taken into the log: leave no stray bytes

    def complete(self, done: Complete) -> None:
        for fut in self.waiters.pop(done.request_id, ()):
            if not fut.done():
                fut.set_result(done)

    def _replicate(self) -> None:
        self._replicate_scheduled = False
        self._propose_staged()
        self.execute(self.node.replicate(mono_ms()))

    def status(self) -> dict:
        st = self.node.status()
        st.update({"selfId": self.self_id, "peers": self.peers,
                   "committedOffset": self.committed_end,
                   "logEndOffset": self.log.log_end})
        return st
