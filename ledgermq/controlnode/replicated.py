"""A control node group: control nodes that keep their state in a Raft log, so that when
one dies (even together with a master) another leads and can elect.

Only the Raft leader serves, and only once an entry of its own term has committed: then
everything committed before it is applied here, and it builds each group's GroupControl
from that, as a restarted single control node does from its files (the brokers' liveness
starts afresh). Each SaveState / SaveCache of a GroupControl becomes a log entry; an
answer goes out only once the entries it may reflect are committed, and a promotion only
once the state naming the slave is. A leader cut off from its majority can neither save
nor promote; its answers from state committed earlier are what a delayed message from a
single control node would have said. Followers (and the leader) apply committed entries
to `ControlState`; a snapshot entry now and then lets every node compact its log.

One port per node (its controlNodePeers address) carries the Raft messages and the
requests of brokers, producers and operators; a follower refuses those with
CONTROLLER_NOT_LEADER naming the leader, and the caller tries it.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from ..drivers.raft import RAFT_MESSAGE, FileRaftLog, RaftDriver, RaftMeta
from ..drivers.raft.file_log import _REC
from ..peer_auth.remoting import PEER_AUTH
from ..peer_auth.core import PeerAuth
from ..remoting import Connection, RemotingCommand, ResponseCode
from ..remoting.tls import DISABLED, Tls
from ..replication.checkpoint import (
    ControlConfig, GroupControl, GroupState, SaveCache, SaveState,
)
from ..replication.raft import Code, Complete, RaftConfig, Role
from ..runtime.clock import mono_ms
from ..runtime.files import DirectoryLock, replace_file
from .service import ControlService
from .state import BARRIER, ControlState, cache_entry, rewrite_entry, state_entry

log = logging.getLogger(__name__)

RAFT = RaftConfig(election_timeout_ms=300, heartbeat_ms=100)  # as the controllers'
SNAPSHOT_EVERY_ENTRIES = 1000
SNAPSHOT_EVERY_BYTES = 4 << 20
# a snapshot carries every cache: it must fit a peer frame (64 MiB) with room to spare
REPLICATED_MAX_CACHE_BYTES = 32 << 20


class CompactingRaftLog(FileRaftLog):
    """The controller's file log, which can also forget everything before a snapshot."""

    def compact_before(self, index: int) -> None:
        """Keep entries from `index` on (a committed snapshot): the file is rewritten."""
        if index <= self.begin:
            return
        self.compact_through(index - 1)
        records = [_REC.pack(e.index, e.term, len(e.data)) + e.data
                   for e in self.entries(self.begin, self.end)]
        self._file.close()
        replace_file(self.path, b"".join(records))
        self._file = open(self.path, "r+b")
        self._pos, pos = {}, 0
        for e, rec in zip(self.entries(self.begin, self.end), records):
            self._pos[e.index] = pos
            pos += len(rec)
        self._end = pos


class ReplicatedControlNode(ControlService, RaftDriver):
    LINK = "control node"

    def __init__(self, node_id: str, peers: dict[str, str], directory: Path,
                 config: ControlConfig | None = None, auth: PeerAuth | None = None,
                 metrics_port: int = 0, tls: Tls = DISABLED, raft: RaftConfig = RAFT):
        config = config or ControlConfig()
        config = dataclasses.replace(config, max_cache_bytes=min(
            config.max_cache_bytes, REPLICATED_MAX_CACHE_BYTES))
        ControlService.__init__(self, config, auth, tls, peers[node_id].rsplit(":", 1)[0],
                                metrics_port)
        self.dir = Path(directory)
        self._dir_lock = DirectoryLock(self.dir, "control-node state")
        self._dir_lock.acquire()  # one control node per state directory
        RaftDriver.__init__(self, node_id, peers, RaftMeta(self.dir),
                            CompactingRaftLog(self.dir / "log"), self.auth, tls=tls)
        self._raft_config = raft
        self.serving = False  # leader, with everything committed before its term applied
        self._last: asyncio.Future[bool] | None = None  # the latest entry proposed
        self._load_state()

    def _load_state(self) -> None:
        """The core and the saved state, from the log up to the saved commit index."""
        self.core = self.raft = self.new_node(self._raft_config)
        self.saved = ControlState()
        self.applied = -1
        self._snapshot_at: int | None = None  # index of a snapshot proposed, not committed
        first = self.log.begin if self.log.begin > 0 else -1  # (a compacted log's first
        self._apply_to(max(first, min(self.meta.commit, self.log.end)))  # is committed)

    def _reopen(self) -> None:
        """(RaftDriver.persist_failed) the log, term, vote and state as a restart reads
        them."""
        fresh, meta = CompactingRaftLog(self.dir / "log"), RaftMeta(self.dir)
        self._close_quietly(self.log)
        self.log, self.meta = fresh, meta
        self._load_state()

    @property
    def address(self) -> str:
        return self.peers[self.self_id]

    async def start(self) -> None:
        await RaftDriver.start(self)
        await self._start_serving()

    async def stop(self) -> None:
        self._stop_serving()
        await RaftDriver.stop(self)
        self._dir_lock.release()

    # ---- requests ---------------------------------------------------------------------
    def _on_request(self, cmd: RemotingCommand, conn: Connection):
        if cmd.code in (PEER_AUTH, RAFT_MESSAGE):
            return RaftDriver._on_request(self, cmd, conn)
        return self.handle(cmd, conn)

    def _refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if self.serving:
            return None
        leader = self.raft.leader if self.raft.leader != self.self_id else None
        addr = self.peers.get(leader, "") if leader else ""
        return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER,
                            f"control node {self.self_id} does not lead its group "
                            f"(leader: {addr or 'unknown'})", {"leaderAddr": addr})

    # ---- state kept in the log ----------------------------------------------------------
    def _load(self, name: str) -> GroupControl:
        g = self.saved.groups.get(name)
        state = GroupState.from_json(g.state) if g is not None and g.state else None
        return GroupControl(self.config, mono_ms(), state, list(g.cache) if g else [])

    def _persist(self, name: str, action: SaveState | SaveCache) -> None:
        if isinstance(action, SaveState):
            data = state_entry(name, action.state)
        elif action.entry is not None:
            data = cache_entry(name, action.entry)
        else:
            data = rewrite_entry(name, self.groups[name].cache)
        self._last = self._propose(data)

    def _durable(self) -> "asyncio.Future[bool] | None":
        return self._last if self._last is not None and not self._last.done() else None

    def _propose(self, data: bytes) -> "asyncio.Future[bool]":
        rid = self.next_request_id()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        self.execute(self.raft.propose(rid, data, mono_ms()))
        ok: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: ok.done() or ok.set_result(
            not f.cancelled() and f.result().code is Code.SUCCESS))
        return ok

    def committed(self, index: int) -> None:
        self._apply_to(index)

    def _apply_to(self, index: int) -> None:
        if self.applied < self.log.begin - 1:
            # our log restarts at the leader's first entry, a snapshot (raft's RESET_LOG)
            self.applied = self.log.begin - 1
        snapshot = None
        while self.applied < index:
            e = self.log.entry(self.applied + 1)
            if e is None:
                break
            self.applied += 1
            if self.saved.apply(e.data):
                snapshot = e.index
        if snapshot is not None and snapshot > self.log.begin:
            self.meta.flush_commit()  # (never a saved commit below the log's begin)
            self.log.compact_before(snapshot)
            if self._snapshot_at is not None and self._snapshot_at <= snapshot:
                self._snapshot_at = None

    def ticked(self, now: int) -> None:
        """The leader writes a snapshot when the log has grown, at a moment when every
        entry in it is applied (so the snapshot is the state after all of them)."""
        s = self.saved
        if not self.serving or self._snapshot_at is not None or self.applied != self.log.end \
                or (s.entries_since_snapshot < SNAPSHOT_EVERY_ENTRIES
                    and s.bytes_since_snapshot < SNAPSHOT_EVERY_BYTES):
            return
        self._snapshot_at = self.log.end + 1
        fut = self._propose(s.snapshot())
        fut.add_done_callback(lambda f: self._snapshot_failed(f.result()))

    def _snapshot_failed(self, ok: bool) -> None:
        if not ok:
            self._snapshot_at = None  # (a new leader writes its own)

    # ---- leading ----------------------------------------------------------------------
    def role_changed(self, role: Role) -> None:
        if role is not Role.LEADER:
            if self.serving:
                log.warning("control node %s stopped leading: %d group(s) left to the next "
                            "leader", self.self_id, len(self.groups))
            self.serving, self.groups, self._last, self._snapshot_at = False, {}, None, None
            return
        term = self.raft.term
        barrier = self._propose(BARRIER)
        barrier.add_done_callback(lambda f: self._lead(term, f.result()))

    def _lead(self, term: int, ok: bool) -> None:
        if not ok or not self.is_leader or self.raft.term != term:
            return
        self.groups = {name: self._load(name) for name in self.saved.groups}
        self.serving = True
        log.warning("control node %s leads (term %d): %d group(s), %s", self.self_id, term,
                    len(self.groups), ", ".join(
                        f"{n} epoch {g.state.epoch} checkpoint {g.state.checkpoint} "
                        f"{len(g.cache)} cached" for n, g in sorted(self.groups.items())))
