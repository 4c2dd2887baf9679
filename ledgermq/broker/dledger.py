"""DLedger mode: the broker drives a RaftNode with asyncio, over its own peer port
(raftio's driver); the Raft log is the commit log itself (raft_log.py). Committed entries
move the store's dispatch bound, so consumers only ever see committed messages.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Callable

from ..raftio import RaftDriver, RaftMeta, parse_peers
from ..raftio.driver import now_ms
from ..replication.raft import RaftConfig, Role
from ..store import MessageStore
from .raft_log import StoreRaftLog

log = logging.getLogger(__name__)

__all__ = ["DLedgerDriver", "parse_peers"]


class DLedgerDriver(RaftDriver):
    TRANSFER_RETRY_MS = 1000

    def __init__(self, store: MessageStore, self_id: str, peers: dict[str, str],
                 directory: Path, on_role_change: Callable[[Role], None],
                 config: RaftConfig | None = None, preferred_leader: str = ""):
        if self_id not in peers:
            raise ValueError(f"dLegerSelfId {self_id} is not in dLegerPeers {sorted(peers)}")
        self.store = store
        raft_log = StoreRaftLog(store, directory)
        super().__init__(self_id, peers, RaftMeta(directory), raft_log)
        # bytes the commit log holds past the last raft entry were never replicated
        if store.commitlog.max_offset > raft_log.log_end:
            store.truncate(raft_log.log_end)
        self.node = self.raft = self.core = self.new_node(config or RaftConfig())
        self.on_role_change = on_role_change
        self.preferred_leader = preferred_leader
        self._transfer_tried = -self.TRANSFER_RETRY_MS
        self._replicate_scheduled = False

    @property
    def committed_end(self) -> int:
        c = self.node.commit
        return self.log.ends[c] if c >= 0 else self.store.commitlog.min_offset

    async def start(self) -> None:
        await super().start()
        self.store.set_dispatch_bound(self.committed_end)

    def ticked(self, now: int) -> None:
        """RocketMQ's preferred leader: a leader that is not it hands over once the
        preferred node holds the whole log (so writes pause only for the hand-over)."""
        p, node = self.preferred_leader, self.node
        if not p or p == self.self_id or not self.is_leader or node.transfer_to is not None:
            return
        if now - self._transfer_tried >= self.TRANSFER_RETRY_MS and node.caught_up(p):
            self._transfer_tried = now
            log.info("dledger %s hands leadership to the preferred leader %s", self.self_id, p)
            self.execute(node.transfer_leadership(p, now))

    def committed(self, index: int) -> None:
        self.store.set_dispatch_bound(self.log.ends[index])

    def role_changed(self, role: Role) -> None:
        self.on_role_change(role)

    # ---- client appends -------------------------------------------------------------
    def propose(self, data: bytes) -> asyncio.Future:
        """Replicate one entry; the future gets the core's Complete (SUCCESS once
        committed by a quorum)."""
        rid = self.next_request_id()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiters[rid] = fut
        self.execute(self.node.propose(rid, data, now_ms(), dispatch=False))
        if not self._replicate_scheduled:  # appends of one loop iteration share a push
            self._replicate_scheduled = True
            loop.call_soon(self._replicate)
        return fut

    def _replicate(self) -> None:
        self._replicate_scheduled = False
        self.execute(self.node.replicate(now_ms()))

    def status(self) -> dict:
        st = self.node.status()
        st.update({"selfId": self.self_id, "peers": self.peers,
                   "committedOffset": self.committed_end,
                   "logEndOffset": self.log.log_end})
        return st
