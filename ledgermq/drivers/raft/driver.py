"""The asyncio driver of a Raft core over its peer port.

It executes the core's actions in order: persists (entries, term and vote, the committed
index) are made durable with one sync before the first message or answer that follows
them. What the log is and what a commit means are the subclass's: a DLedger broker's
entries are commit-log ranges, a controller's are metadata commands.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import struct
import time
import zlib
from pathlib import Path

from ...peer_auth.core import PeerAuth
from ...peer_auth.remoting import PEER_AUTH, PeerGate
from ...remoting import Connection, RemotingClient, RemotingCommand, RemotingError, RemotingServer
from ...remoting.tls import DISABLED, Tls
from ...replication.raft import (
    AppendEntries, Code, Complete, RaftNode, ResetLog, Role, SaveCommit, SaveMeta, Send,
    TruncateAfter,
)
from ...replication.raft.messages import PERSIST_ACTIONS
from ...runtime.clock import mono_ms
from ...runtime.files import replace_file
from .codec import RAFT_MESSAGE, decode_message, encode_message

log = logging.getLogger(__name__)

TICK_S = 0.01
# the persist actions written before a Send syncs them (SaveCommit is saved on its own)
_LOG_WRITES = frozenset(PERSIST_ACTIONS) - {SaveCommit}


# a push holds at most max_push_bytes, or one entry of any size: an entry is at most
# DLedger mode's gathering limit plus one client request (itself at most a 16 MiB frame)
PEER_MAX_FRAME = 64 * 1024 * 1024



class RaftMeta:
    """Term, vote and committed index, each written atomically."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        doc = json.loads((self.dir / "meta").read_text()) if (self.dir / "meta").exists() else {}
        self.term = int(doc.get("term", 0))
        self.voted_for = doc.get("votedFor")
        self._commit_path = self.dir / "commit"
        self.commit = self._saved_commit = read_commit(self._commit_path)
        if self._commit_path.exists() and self._commit_path.stat().st_size != _COMMIT.size:
            self._commit_path.unlink()  # an earlier version's text: rewritten below
            write_commit(self._commit_path, self.commit)
        self._commit_saved_at = 0.0

    def save(self, term: int, voted_for: str | None) -> None:
        self.term, self.voted_for = term, voted_for
        replace_file(self.dir / "meta", json.dumps({"term": term, "votedFor": voted_for})
                     .encode(), durable=True)

    COMMIT_SAVE_INTERVAL_S = 0.1

    def save_commit(self, index: int, *, now: float | None = None) -> None:
        """The committed index, written at most every COMMIT_SAVE_INTERVAL_S: a lower
        value on disk only makes a restarted node wait for the leader to tell it again,
        and a file replace per commit would cost the event loop a rename each time."""
        self.commit = index
        now = time.monotonic() if now is None else now
        if now - self._commit_saved_at >= self.COMMIT_SAVE_INTERVAL_S:
            self.flush_commit(now)

    def flush_commit(self, now: float | None = None) -> None:
        self._commit_saved_at = time.monotonic() if now is None else now
        if self._saved_commit != self.commit:
            self._saved_commit = self.commit
            write_commit(self._commit_path, self.commit)


_COMMIT = struct.Struct(">qI")  # the committed index, then the CRC32 of its 8 bytes


def read_commit(path: Path) -> int:
    """The committed index saved at `path`; -1 when there is none or it was torn."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return -1
    if len(raw) == _COMMIT.size:
        index, crc = _COMMIT.unpack(raw)
        return index if zlib.crc32(raw[:8]) == crc else -1
    try:
        return int(raw)  # the text an earlier version wrote
    except ValueError:
        return -1


def write_commit(path: Path, index: int) -> None:
    """Overwritten in place, without fsync (the index is a hint: a restarted node that
    finds a lower one waits for the leader to say it again; a torn one fails its CRC).
    A rename per save made the event loop wait on ext4's journal: ~9% of a follower's
    loop time under load."""
    head = struct.pack(">q", index)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, head + struct.pack(">I", zlib.crc32(head)), 0)
    finally:
        os.close(fd)


class _DiskRefused(Exception):
    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


class RaftDriver:
    """Subclasses set `self.core` (step/tick like RaftNode's) and `self.raft` (the
    RaftNode inside it), and may override `committed`, `other` and `role_changed`.

    `auth`: the cluster secret. With one, peers authenticate each connection (both ways)
    and raft messages from a connection that did not are dropped, so a stranger can
    neither vote, nor append, nor move a term (counted in `auth.refused`)."""

    core: object
    raft: RaftNode
    LINK = "raft peer port"  # names the port in authentication failures

    def __init__(self, self_id: str, peers: dict[str, str], meta: RaftMeta, log_store,
                 auth: PeerAuth | None = None, tls: Tls = DISABLED):
        if self_id not in peers:
            raise ValueError(f"self id {self_id} is not among the peers {sorted(peers)}")
        self.self_id = self_id
        self.peers = peers
        self.meta = meta
        self.log = log_store
        self.role = Role.FOLLOWER
        self.gate = PeerGate(auth or PeerAuth(), self.LINK)
        # peers (and, for a controller, brokers) reach this port; this node dials its peers
        self.client = RemotingClient(authenticate=self.gate.authenticate,
                                     ssl_context=tls.client)
        host, port = peers[self_id].rsplit(":", 1)
        self.server = RemotingServer(self._on_request, host, int(port),
                                     max_frame=PEER_MAX_FRAME, tls=tls, what="raft port")
        self.waiters: dict[int, asyncio.Future] = {}
        self._next_rid = 1
        self._task: asyncio.Task | None = None
        self._connecting: set[str] = set()
        self.halted = False  # the disk refused a write (persist_failed)
        self._reopen_tried = -self.REOPEN_EVERY_MS
        self._persist_logged: dict[int, int] = {}  # by log level: when last logged

    def new_node(self, config, **kw) -> RaftNode:
        # never above what the log holds (a torn tail may have been cut since it was saved)
        commit = min(self.meta.commit, self.log.end)
        return RaftNode(self.self_id, list(self.peers), config, term=self.meta.term,
                        voted_for=self.meta.voted_for, log=self.log, commit=commit,
                        rng=random.Random(), now=mono_ms(),
                        promised=getattr(self.log, "promised", None), **kw)

    async def start(self) -> None:
        await self.server.start()
        self._task = asyncio.create_task(self._ticker())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.server.stop()
        await self.client.close()
        self.meta.flush_commit()
        self.log.close()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                now = mono_ms()
                if self.halted and now - self._reopen_tried >= self.REOPEN_EVERY_MS:
                    self._reopen_now(now)
                self.execute(self.core.tick(now))
                self.ticked(now)
            except Exception:
                log.exception("raft tick failed")

    def _on_request(self, cmd: RemotingCommand, conn: Connection):
        if cmd.code == PEER_AUTH:
            return self.gate.serve(cmd, conn)
        if cmd.code == RAFT_MESSAGE:
            if self.gate.refusal(cmd, conn) is not None:
                return None  # oneway: nobody to answer; counted and logged
            try:
                msg = decode_message(cmd)
            except (KeyError, ValueError, TypeError, struct.error) as e:
                log.warning("bad raft message from %s: %s", conn.peer, e)
                return None
            # a push may cut our tail and commit past the cut: what was committed before it
            # tells a replaced uncommitted tail from damage
            committed = self.raft.commit
            self.execute(self.core.step(msg, mono_ms()), committed)
        return None

    # ---- the driver contract --------------------------------------------------------
    def execute(self, actions: list, committed: int | None = None) -> None:
        """Carry out the core's actions; `committed`: the commit index before the step
        that made them (the current one if not given). A write to disk that fails stops
        the rest: no message or answer may claim what the disk does not hold
        (persist_failed says what happens then)."""
        if self.halted:  # the core's memory is not the disk's: only failures go out
            for a in actions:
                if isinstance(a, Complete):
                    self.complete(Complete(a.request_id, Code.NOT_LEADER))
            return
        committed = self.raft.commit if committed is None else committed
        dirty = False
        try:
            for a in actions:
                kind = type(a)  # (the core's actions are final classes)
                if kind in _LOG_WRITES:
                    dirty = self._write_action(a, committed) or dirty
                elif kind is SaveCommit:
                    self.meta.save_commit(a.index)
                    self.committed(a.index)
                else:
                    if dirty:
                        self._write_action(None, committed)
                        dirty = False
                    if kind is Send:
                        self._send(a.msg)
                    elif kind is Complete:
                        self.complete(a)
                    else:
                        self.other(a)
            if dirty:
                self._write_action(None, committed)
        except _DiskRefused as e:
            self.persist_failed(e.cause)
        self._note_role()

    def _write_action(self, a, committed: int) -> bool:
        """One of the core's persist actions (None: sync what was written); True if it
        left entries to sync."""
        try:
            kind = type(a)
            if a is None:
                self.log.sync()
            elif kind is AppendEntries:
                self.log.write_entries(a.entries)
                return True
            elif kind is SaveMeta:
                self.meta.save(a.term, a.voted_for)
            elif kind is TruncateAfter:
                self._drop_unsent_pushes()
                if a.index < committed:
                    log.warning("raft %s replaces committed entries after %d: they differ "
                                "from the leader's (damaged on this disk)", self.self_id,
                                a.index)
                self.log.cut_after(a.index)
            else:
                self._drop_unsent_pushes()
                self.log.write_reset(a.entry)
                return True
        except self.persist_errors as e:
            raise _DiskRefused(e) from e
        return False

    # ---- a write the disk refused ----------------------------------------------------
    persist_errors: tuple[type[Exception], ...] = (OSError,)  # what such a write raises
    PERSIST_LOG_EVERY_MS = 10_000
    REOPEN_EVERY_MS = 1000

    def persist_failed(self, e: Exception) -> None:
        """The disk refused a write of the log, term or vote (full, or failing): the core
        holds entries or a vote the disk does not. Acting on that memory would count a
        copy that is not there (a leader counting itself, a follower answering the next
        push from memory), so the node halts: it sends nothing, answers no peer, leads
        nothing, and its waiting proposals fail. Every REOPEN_EVERY_MS it tries to start
        again from what its disk holds, as a restart would (`_reopen`), and takes part
        again once that works: at once the first time, then at most that often, as
        rereading the log costs (a full disk fails every push a follower is sent)."""
        self._log_disk(f"the disk refused a write ({e}): this node halts until it has "
                       "started again from what its disk holds")
        self.halted = True
        self._drop_unsent_pushes()
        for rid in list(self.waiters):
            self.complete(Complete(rid, Code.NOT_LEADER))
        if self.role is Role.LEADER:
            self.role = Role.FOLLOWER
            self.role_changed(self.role)
        now = mono_ms()
        if now - self._reopen_tried >= self.REOPEN_EVERY_MS:
            self._reopen_now(now)

    def _reopen(self) -> None:
        """Build the log, term, vote and core again from the disk, raising what
        persist_errors lists if it refuses; replace the old ones only once all is built."""
        raise NotImplementedError

    def _reopen_now(self, now: int) -> None:
        self._reopen_tried = now
        try:
            self._reopen()
        except self.persist_errors as e:
            self._log_disk(f"still halted, the disk refuses ({e}); trying again every "
                           f"{self.REOPEN_EVERY_MS} ms")
            return
        self.halted = False
        self._log_disk(f"started again from its disk (last entry {self.log.end}, term "
                       f"{self.raft.term})", logging.WARNING)

    def _log_disk(self, what: str, level: int = logging.ERROR) -> None:
        now = mono_ms()
        if now - self._persist_logged.get(level, -self.PERSIST_LOG_EVERY_MS) >= \
                self.PERSIST_LOG_EVERY_MS:
            self._persist_logged[level] = now
            log.log(level, "raft %s: %s (logged at most every %d s)", self.self_id, what,
                    self.PERSIST_LOG_EVERY_MS // 1000)

    @staticmethod
    def _close_quietly(old_log) -> None:
        try:
            old_log.close()  # (a buffered log's unwritten bytes go with it)
        except OSError:
            pass

    def _note_role(self) -> None:
        if self.halted:  # a halted node is a follower, whatever its core says
            return
        if self.raft.role is not self.role:
            self.role = self.raft.role
            log.info("raft %s is now %s in term %d", self.self_id, self.role.value,
                     self.raft.term)
            self.role_changed(self.role)

    def complete(self, done: Complete) -> None:
        """A proposal committed or failed: its waiter gets the core's Complete."""
        fut = self.waiters.pop(done.request_id, None)
        if fut is not None and not fut.done():
            fut.set_result(done)

    def ticked(self, now: int) -> None:
        """After each tick (subclasses' periodic work)."""

    def committed(self, index: int) -> None:
        pass

    def other(self, action) -> None:
        pass

    def role_changed(self, role: Role) -> None:
        pass

    def next_request_id(self) -> int:
        rid = self._next_rid
        self._next_rid += 1
        return rid

    def _drop_unsent_pushes(self) -> None:
        """Before the log is cut: a push this node sent while it led may still wait in a
        socket buffer as views on the bytes being cut; raft copes with it being lost, not
        with it carrying the bytes written there next."""
        for addr in self.peers.values():
            conn = self.client.open_connection(addr)
            if conn is not None:
                conn.drop_unsent()

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

    @property
    def is_leader(self) -> bool:
        return not self.halted and self.raft.role is Role.LEADER
