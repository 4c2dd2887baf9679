"""DLedger mode: the broker drives a RaftNode with asyncio, over its own peer port.

The driver runs the core's actions in order: persists (commit-log bytes, raft index, term
and vote) are made durable with one fsync before the first message or client answer that
follows them; committed entries move the store's dispatch bound, so consumers only ever
see committed messages.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import struct
import time
from dataclasses import fields
from pathlib import Path
from typing import Callable

from ..remoting import Connection, RemotingClient, RemotingCommand, RemotingError, RemotingServer
from ..replication.raft import (
    AppendEntries, Code, Complete, Entry, Push, PushResponse, PushType, RaftConfig, RaftNode,
    ResetLog, Role, SaveCommit, SaveMeta, Send, TimeoutNow, TruncateAfter, VoteRequest,
    VoteResponse,
)
from ..store import MessageStore
from .raft_log import RaftMeta, StoreRaftLog

log = logging.getLogger(__name__)

RAFT_MESSAGE = 9901  # request code of raft messages between peers (their own port)
_TYPES = {c.__name__: c for c in (VoteRequest, VoteResponse, Push, PushResponse, TimeoutNow)}
_ENTRY = struct.Struct(">qqi")


def parse_peers(text: str) -> dict[str, str]:
    """'n0-127.0.0.1:40911;n1-127.0.0.1:40912' -> {'n0': '127.0.0.1:40911', ...}"""
    peers = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        node, sep, addr = item.partition("-")
        if not sep or ":" not in addr:
            raise ValueError(f"dLegerPeers item {item!r} is not id-host:port")
        peers[node] = addr
    if len(peers) < 1:
        raise ValueError("dLegerPeers is empty")
    return peers


def encode_message(msg) -> RemotingCommand:
    ext, body = {"t": type(msg).__name__}, b""
    for f in fields(msg):
        v = getattr(msg, f.name)
        if f.name == "entries":
            body = b"".join(_ENTRY.pack(e.index, e.term, len(e.data)) + e.data for e in v)
        elif isinstance(v, (PushType, Code)):
            ext[f.name] = v.value
        else:
            ext[f.name] = json.dumps(v)
    return RemotingCommand(RAFT_MESSAGE, ext=ext, body=body)


def decode_message(cmd: RemotingCommand):
    cls = _TYPES[cmd.ext["t"]]
    kw = {}
    for f in fields(cls):
        if f.name == "entries":
            entries, mv, pos = [], memoryview(cmd.body), 0
            while pos < len(mv):
                index, term, n = _ENTRY.unpack_from(mv, pos)
                pos += _ENTRY.size
                entries.append(Entry(index, term, bytes(mv[pos:pos + n])))
                pos += n
            kw["entries"] = tuple(entries)
        elif f.name == "kind":
            kw["kind"] = PushType(cmd.ext["kind"])
        elif f.name == "code":
            kw["code"] = Code(cmd.ext["code"])
        elif f.name in cmd.ext:
            kw[f.name] = json.loads(cmd.ext[f.name])
    return cls(**kw)


class DLedgerDriver:
    def __init__(self, store: MessageStore, self_id: str, peers: dict[str, str],
                 directory: Path, on_role_change: Callable[[Role], None],
                 config: RaftConfig | None = None):
        if self_id not in peers:
            raise ValueError(f"dLegerSelfId {self_id} is not in dLegerPeers {sorted(peers)}")
        self.store = store
        self.self_id = self_id
        self.peers = peers
        self.meta = RaftMeta(directory)
        self.log = StoreRaftLog(store, directory)
        # bytes the commit log holds past the last raft entry were never replicated
        if store.commitlog.max_offset > self.log.log_end:
            store.truncate(self.log.log_end)
        self.node = RaftNode(self_id, list(peers), config or RaftConfig(), term=self.meta.term,
                             voted_for=self.meta.voted_for, log=self.log,
                             commit=self.meta.commit, rng=random.Random(), now=self._now())
        self.on_role_change = on_role_change
        self.role = Role.FOLLOWER
        self.client = RemotingClient()
        host, port = peers[self_id].rsplit(":", 1)
        self.server = RemotingServer(self._on_request, host, int(port))
        self.waiters: dict[int, asyncio.Future] = {}
        self._next_rid = 1
        self._task: asyncio.Task | None = None
        self._connecting: set[str] = set()
        self._replicate_scheduled = False

    @staticmethod
    def _now() -> int:
        return int(time.monotonic() * 1000)

    @property
    def committed_end(self) -> int:
        c = self.node.commit
        return self.log.ends[c] if c >= 0 else self.store.commitlog.min_offset

    async def start(self) -> None:
        await self.server.start()
        self.store.set_dispatch_bound(self.committed_end)
        self._task = asyncio.create_task(self._ticker())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        await self.server.stop()
        await self.client.close()
        self.log.close()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            try:
                self.execute(self.node.tick(self._now()))
            except Exception:
                log.exception("raft tick failed")

    def _on_request(self, cmd: RemotingCommand, conn: Connection):
        if cmd.code == RAFT_MESSAGE:
            try:
                msg = decode_message(cmd)
            except (KeyError, ValueError, TypeError, struct.error) as e:
                log.warning("bad raft message from %s: %s", conn.peer, e)
                return None
            self.execute(self.node.step(msg, self._now()))
        return None

    # ---- the driver contract --------------------------------------------------------
    def execute(self, actions: list) -> None:
        dirty = False
        for a in actions:
            if isinstance(a, SaveMeta):
                self.meta.save(a.term, a.voted_for)
            elif isinstance(a, AppendEntries):
                self.log.write_entries(a.entries)
                dirty = True
            elif isinstance(a, TruncateAfter):
                self.log.cut_after(a.index)
            elif isinstance(a, ResetLog):
                self.log.cut_after(-1)
                self.log.write_entries((a.entry,))
                dirty = True
            elif isinstance(a, SaveCommit):
                self.meta.save_commit(a.index)
                self.store.set_dispatch_bound(self.log.ends[a.index])
            else:
                if dirty:
                    self.log.sync()
                    dirty = False
                if isinstance(a, Send):
                    self._send(a.msg)
                elif isinstance(a, Complete):
                    fut = self.waiters.pop(a.request_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(a)
        if dirty:
            self.log.sync()
        if self.node.role is not self.role:
            self.role = self.node.role
            log.info("dledger %s is now %s in term %d", self.self_id, self.role.value,
                     self.node.term)
            self.on_role_change(self.role)

    def _send(self, msg) -> None:
        addr = self.peers.get(msg.dst)
        conn = self.client.open_connection(addr) if addr else None
        if conn is None:
            if addr and msg.dst not in self._connecting:  # connect in the background
                self._connecting.add(msg.dst)
                asyncio.get_running_loop().create_task(self._connect(msg.dst, addr))
            return  # raft copes with a lost message
        try:
            conn.oneway(encode_message(msg))
        except RemotingError:
            pass

    async def _connect(self, node: str, addr: str) -> None:
        try:
            await self.client.connection(addr)
        except RemotingError:
            await asyncio.sleep(0.2)
        finally:
            self._connecting.discard(node)

    # ---- client appends -------------------------------------------------------------
    def propose(self, data: bytes) -> asyncio.Future:
        """Replicate one entry; the future gets the core's Complete (SUCCESS once
        committed by a quorum)."""
        rid = self._next_rid
        self._next_rid += 1
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiters[rid] = fut
        self.execute(self.node.propose(rid, data, self._now(), dispatch=False))
        if not self._replicate_scheduled:  # appends of one loop iteration share a push
            self._replicate_scheduled = True
            loop.call_soon(self._replicate)
        return fut

    def _replicate(self) -> None:
        self._replicate_scheduled = False
        self.execute(self.node.replicate(self._now()))

    @property
    def is_leader(self) -> bool:
        return self.node.role is Role.LEADER

    def status(self) -> dict:
        st = self.node.status()
        st.update({"selfId": self.self_id, "peers": self.peers,
                   "committedOffset": self.committed_end,
                   "logEndOffset": self.log.log_end})
        return st
