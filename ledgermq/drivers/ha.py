"""Classic HA (S2) on a broker: the asyncio drivers of the HAMaster and HASlave cores over
the HA port (the seed's wire format, see replication/ha/actions.py).

The master streams commit-log bytes straight from the mapped segments; the slave appends
whole messages with the store's append-as-replica and dispatches its own consume queues.

Checkpoint mode (S3) counts only copies on disk, whatever flushDiskType says: the master
sends its slaves only what it has flushed (so the checkpoint, the minimum of the slaves'
reports, never covers a byte the master could lose in a crash, and a master restarted in
the same epoch never rewrites offsets a slave already holds), and a slave reports only
what it has flushed. Both flush by the store's group commit: one fsync for everything
appended meanwhile, then one push (master) or one report (slave).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ..peer_auth.core import PeerAuth, PeerRefused
from ..peer_auth.stream import admit, connect
from ..remoting.listen import listen
from ..remoting.tls import DISABLED, Tls
from ..replication.ha import (
    CHECKPOINT_FRAME, CHECKPOINT_REPORT, DIGEST, FORKED_FRAME, HEADER, HELLO, REFILL_DATA,
    REFILL_FRAME, REPORT, TAIL, Append, AskRefill, Close, Complete, Disconnect, Flush, HAConfig,
    HAMaster, HASlave, Heartbeat, PublishCheckpoint, Recovered, RefillAppend, Report,
    SaveCheckpoint, SendLog, StartAt, StoreCheckpoint, SyncStatus, Transfer,
)
from ..runtime.clock import mono_ms
from ..store import FlushDiskType, MessageStore, StoreError
from .ha_refill import (
    LogForked, drop_forked_log, forked, note_slave, read_refill, send_log, tail_of,
)

log = logging.getLogger(__name__)

TICK_S = 0.02
RECONNECT_MIN_S, RECONNECT_MAX_S = 0.05, 1.0



class HAMasterDriver:
    """Serves slaves on the HA port; answers sync requests (SYNC_MASTER, checkpoint).

    S3: `on_checkpoint(checkpoint, members)` saves the consistent checkpoint durably (it
    blocks: it runs in a thread, one save at a time, the newest waiting one next); the
    core publishes and counts a checkpoint only once its save returned.

    `auth`: the broker's cluster secret; a slave that does not prove it knows it is
    closed before the core hears of it (peer_auth/stream.py), and counted in `auth.refused`."""

    def __init__(self, store: MessageStore, config: HAConfig, host: str, port: int, *,
                 checkpoint: int = 0, members: dict[int, int] | None = None,
                 epoch: int = 0, on_checkpoint: Callable[[int, tuple], None] | None = None,
                 auth: PeerAuth | None = None, tls: Tls = DISABLED,
                 recover_ms: int | None = None, wait_for_a_slave: bool = True,
                 on_recovered: Callable[[], None] | None = None):
        self.store = store
        self.on_recovered = on_recovered  # S2 SYNC_MASTER: refilled, may take writes
        self.auth = auth or PeerAuth()
        self.tls = tls  # tls.server.mode of the HA port, as of the client port
        self.durable_push = config.checkpoint  # S3: slaves get only what is flushed
        self._flush_asked = 0  # S3: the log end the last flush wait was asked for
        self._stopped = False
        self.core = HAMaster(config, self._pushable(), mono_ms(),
                             checkpoint=checkpoint, members=members, epoch=epoch,
                             recover_ms=recover_ms, had_slaves=wait_for_a_slave)
        self.host, self.port = host, port
        self.on_checkpoint = on_checkpoint
        self._save_wanted: tuple[int, tuple] | None = None  # the newest unsaved checkpoint
        self._saving: asyncio.Future | None = None
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.waiters: dict[int, asyncio.Future] = {}
        self._next_id = 1
        self._server: asyncio.base_events.Server | None = None
        self._ticker: asyncio.Task | None = None
        self._push_scheduled = False
        self._conn_tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await listen(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve),
            self.host, self.port, self.tls, what="HA port")
        self.port = self._server.sockets[0].getsockname()[1]
        self._ticker = asyncio.create_task(self._tick_loop())

    async def stop(self) -> None:
        self._stopped = True
        if self._ticker:
            self._ticker.cancel()
        if self._server:
            self._server.close()
        for w in list(self.writers.values()):
            w.close()
        for t in list(self._conn_tasks):
            t.cancel()
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_result(SyncStatus.TIMEOUT)
        self.waiters.clear()
        if self._saving is not None:  # a later master's save must not be overtaken
            await asyncio.gather(self._saving, return_exceptions=True)
        if self._server:
            await self._server.wait_closed()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.execute(self.core.tick(mono_ms()))
                if self.durable_push:
                    self._flushed()  # a flush nobody waited for (periodic, or late)
                    self._save_next()  # a save that failed is tried again
            except Exception:
                log.exception("HA master tick failed")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conn_tasks.add(asyncio.current_task())
        peer = writer.get_extra_info("peername")
        try:
            try:  # the cluster secret first: a refused peer never reaches the core
                first = await admit(reader, writer, self.auth.secret)
            except PeerRefused as e:
                self.auth.refuse("HA port", peer, e)
                return
            except (ConnectionError, OSError) as e:
                log.info("HA: slave %s gone before its first message: %s", peer, e)
                return
            if first[:1] == b"\x16" and not self.tls.serves_tls:  # a ClientHello, not a report
                log.warning("HA: closing %s: it starts a TLS handshake and this HA port "
                            "has tls.server.mode=disabled", peer)
                return
            if self.auth.enabled:
                self.auth.accepted += 1
            await self._serve_slave(reader, writer, peer, first)
        finally:
            self._conn_tasks.discard(asyncio.current_task())
            writer.close()

    async def _serve_slave(self, reader, writer, peer, first: bytes) -> None:
        link = self._next_id
        self._next_id += 1
        self.writers[link] = writer
        log.info("HA: slave %s connected%s", peer,
                 " (authenticated)" if self.auth.enabled else "")
        if not self.core.config.checkpoint:
            note_slave(self.store)
        try:
            self.execute(self.core.connected(link, mono_ms()))
            while link in self.writers:
                await self._read_slave(reader, link, peer, first)
                first = b""
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError) as e:
            log.info("HA: slave %s gone: %s", peer, e or type(e).__name__)
        finally:
            self.writers.pop(link, None)
            self.execute(self.core.disconnected(link))

    async def _read_slave(self, reader: asyncio.StreamReader, link: int, peer,
                          first: bytes = b"") -> None:
        """One message from a slave: its max-offset report (with its id and epoch in S3).
        `first`: its start, already read (peer_auth.stream.admit)."""
        if self.core.config.checkpoint:
            offset, slave_id, epoch = CHECKPOINT_REPORT.unpack(first + await reader.readexactly(
                CHECKPOINT_REPORT.size - len(first)))
        else:
            offset, slave_id, epoch = REPORT.unpack(first + await reader.readexactly(
                REPORT.size - len(first)))[0], None, 0
            if offset == REFILL_DATA:  # its log, asked for while we recover
                at, body = await read_refill(reader)
                self.execute(self.core.refill_data(link, at, body, mono_ms()))
                return
            if offset == HELLO:  # first on a link: its end, and the bytes just before it
                offset, digest = TAIL.unpack(await reader.readexactly(TAIL.size))
                if forked(self.store, offset, digest):
                    log.error("HA: slave %s holds other bytes than ours before its end %d "
                              "(our log lost bytes and took others there while it was "
                              "away): refused; it drops its log and copies ours again",
                              peer, offset)
                    w = self.writer(link)
                    if w is not None:  # it drops its log and copies ours again
                        w.write(HEADER.pack(offset, FORKED_FRAME))
                    self.execute([Close(link, "its log forks from ours")])
                    return
        self.execute(self.core.report(link, offset, mono_ms(), slave_id,
                                      log_begin=self.store.commitlog.min_offset, epoch=epoch))

    def writer(self, link: int) -> asyncio.StreamWriter | None:
        """The link's writer, if it is still open (writing to a closed one raises)."""
        w = self.writers.get(link)
        return None if w is None or w.is_closing() else w

    def send_log(self, link: int, offset: int, size: int, header: bytes) -> str | None:
        """`header`, then log bytes [offset, offset+size), to the open link; why not, or None."""
        w = self.writer(link)
        if w is None:
            return None
        try:
            data = self.store.commitlog.read(offset, size) if size else b""
        except StoreError as e:
            log.warning("HA: cannot send %d+%d: %s", offset, size, e)
            return str(e)
        # one writev: written apart, the header left as a segment of its own and the slave
        # woke for it, then again for the bytes
        w.writelines((header, data) if size else (header,))
        return None

    def execute(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, Transfer):
                why = self.send_log(a.link, a.offset, a.size, HEADER.pack(a.offset, a.size))
                if why is not None:
                    self.execute([Close(a.link, why)])
            elif isinstance(a, Heartbeat):
                w = self.writer(a.link)
                if w is not None:
                    w.write(HEADER.pack(a.offset, 0))
            elif isinstance(a, PublishCheckpoint):
                w = self.writer(a.link)
                if w is not None:
                    w.write(HEADER.pack(a.checkpoint, CHECKPOINT_FRAME))
            elif isinstance(a, Close):
                log.warning("HA: closing slave link: %s", a.reason)
                w = self.writers.pop(a.link, None)
                if w is not None:
                    w.close()
            elif isinstance(a, Complete):
                fut = self.waiters.pop(a.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(a.status)
            elif isinstance(a, SaveCheckpoint):
                self._save_wanted = (a.checkpoint, a.members)
                self._save_next()
            elif isinstance(a, AskRefill):
                w = self.writer(a.link)
                if w is not None:
                    log.warning("HA: a slave holds our log past %d, which we lost: asking "
                                "it for the rest", a.offset)
                    w.write(HEADER.pack(a.offset, REFILL_FRAME) +
                            DIGEST.pack(tail_of(self.store, a.offset)))
            elif isinstance(a, RefillAppend):
                self._refill(a)
            elif isinstance(a, Recovered):
                log.warning("HA: recovered after the restart (log end %d): taking writes",
                            a.log_end)
                if self.on_recovered is not None:
                    self.on_recovered()

    def _refill(self, a: RefillAppend) -> None:
        try:
            end = self.store.append_raw(a.offset, a.data, partial_tail=True)
        except StoreError as e:
            source = self.core.recovery.source
            log.error("HA: the slave's log at %d does not append to ours: %s", a.offset, e)
            self.execute([Close(source, f"its log does not continue ours: {e}")])
            return
        self.execute(self.core.refill_appended(end, mono_ms()))

    def _save_next(self) -> None:
        if self._saving is not None or self._save_wanted is None or self._stopped:
            return
        checkpoint, members = self._save_wanted
        self._save_wanted = None
        if self.on_checkpoint is None:  # nothing to save it to: durable as it is
            self.execute(self.core.checkpoint_saved(checkpoint, mono_ms()))
            return
        self._saving = asyncio.get_running_loop().run_in_executor(
            None, self.on_checkpoint, checkpoint, members)
        self._saving.add_done_callback(lambda f: self._saved(f, checkpoint, members))

    def _saved(self, fut: asyncio.Future, checkpoint: int, members: tuple) -> None:
        self._saving = None
        if self._stopped:
            return
        e = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or e is not None:
            log.error("saving the consistent checkpoint %d failed (retrying): %s", checkpoint, e)
            if self._save_wanted is None:
                self._save_wanted = (checkpoint, members)  # the next tick tries again
            return
        self.execute(self.core.checkpoint_saved(checkpoint, mono_ms()))
        self._save_next()

    def appended(self) -> None:
        """The log grew: push to slaves once per loop iteration (many sends share it)."""
        if not self._push_scheduled:
            self._push_scheduled = True
            asyncio.get_running_loop().call_soon(self._push)

    def _push(self) -> None:
        self._push_scheduled = False
        if not self.durable_push:
            self.execute(self.core.appended(self.store.commitlog.max_offset, mono_ms()))
            return
        end = self.store.commitlog.max_offset
        if end > self._flush_asked:  # one wait per loop iteration; the flushes are shared
            self._flush_asked = end
            self.store.flush_wait(end).add_done_callback(self._flushed)

    def _pushable(self) -> int:
        log_ = self.store.commitlog
        return log_.flushed_offset if self.durable_push else log_.max_offset

    def _flushed(self, _=None) -> None:
        """S3: push what the master's flushes made durable since the last push."""
        flushed = self.store.commitlog.flushed_offset
        if not self._stopped and flushed > self.core.log_end:
            self.execute(self.core.appended(flushed, mono_ms()))

    def sync(self, end_offset: int) -> "asyncio.Future[SyncStatus]":
        """A future of how the write ending at `end_offset` got covered (see HAMaster)."""
        rid = self._next_id
        self._next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        # the write goes out with the push already scheduled for this loop iteration: all
        # sends of one iteration share a chunk (pushing here would send one per message)
        self.execute(self.core.sync(rid, end_offset, mono_ms()))
        return fut

    def end_recovery(self) -> None:
        """Take writes now, without the refill (an operator's END_HA_RECOVERY)."""
        self.execute(self.core.end_recovery(mono_ms()))

    def status(self) -> dict:
        return self.core.status()


class HASlaveDriver:
    """Follows a master's HA port: appends its stream, reports the max offset."""

    def __init__(self, store: MessageStore, config: HAConfig,
                 master_addr: Callable[[], Awaitable[str | None]], *, slave_id: int = 0,
                 epoch: int = 0, on_checkpoint: Callable[[int], None] | None = None,
                 auth: PeerAuth | None = None, tls: Tls = DISABLED):
        self.store = store
        self.auth = auth or PeerAuth()  # the master must prove it knows our secret too
        self.frames = 0  # from the master on this connection (none: it closed at once)
        self.config = config
        self.tls = tls  # tls.client: the master's HA port with TLS (tls.enable)
        self.master_addr = master_addr
        self.slave_id = slave_id
        self.epoch = epoch  # S3: the epoch whose master it follows (sent in each report)
        self.on_checkpoint = on_checkpoint
        self.core = HASlave(config, store.commitlog.max_offset, mono_ms())
        self.writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        self._sending: asyncio.Task | None = None  # our log, to a recovering master
        self.connected_to: str | None = None
        self._stopped = False
        # S2/S1 under SYNC_FLUSH: flush each append before its report (S3: the core's Flush)
        self.sync_flush = store.config.flushDiskType is FlushDiskType.SYNC_FLUSH \
            and not config.checkpoint

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        self._ticker = asyncio.create_task(self._tick_loop())

    async def stop(self) -> None:
        self._stopped = True
        tasks = [t for t in (self._task, self._ticker, self._sending) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.writer is not None:
            self.writer.close()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            if self.writer is not None:
                self.execute(self.core.tick(mono_ms()))

    async def _run(self) -> None:
        backoff = RECONNECT_MIN_S  # a master that is just starting up is retried soon
        while True:
            addr = None
            try:
                addr = await self.master_addr()
                if addr:
                    await self._follow(addr)
            except PeerRefused as e:
                self.auth.refuse("HA link", addr, e)
            except LogForked:
                drop_forked_log(self.store)
            except asyncio.IncompleteReadError as e:
                if self.writer is not None and not self.frames and not self.auth.enabled:
                    log.warning("HA: master %s closed the link before sending anything: if it "
                                "requires a cluster secret, set clusterSecret here too", addr)
                else:
                    log.info("HA: connection to master %s ended: %s", addr, e)
            except (OSError, ValueError) as e:
                log.info("HA: connection to master %s ended: %s", addr, e)
            except Exception:
                log.exception("HA: following master %s failed", addr)
            finally:
                if self.writer is not None:
                    self.writer.close()
                    self.writer = None
                    self.connected_to = None
                    self.core.disconnected(mono_ms())
                    backoff = RECONNECT_MIN_S
            await asyncio.sleep(backoff)
            backoff = min(RECONNECT_MAX_S, backoff * 2)

    async def _connect(self, addr: str) -> asyncio.StreamReader:
        """Connect (and authenticate) to the master; its link is ours from now on."""
        reader, writer = await connect(addr, self.auth.secret, ssl_context=self.tls.client)
        self.writer, self.connected_to, self.frames = writer, addr, 0
        return reader

    async def _follow(self, addr: str) -> None:
        reader = await self._connect(addr)
        writer = self.writer
        self.core = HASlave(self.config, self.store.commitlog.max_offset, mono_ms(),
                            flushed=self.store.commitlog.flushed_offset)
        log.info("HA: following master %s from offset %d", addr, self.core.max_offset)
        self.execute(self.core.connected(mono_ms()))
        while self.writer is writer:
            offset, size = HEADER.unpack(await reader.readexactly(HEADER.size))
            if size == FORKED_FRAME:
                raise LogForked(f"at {offset}")
            if size < REFILL_FRAME or size > (64 << 20):
                raise ValueError(f"bad HA header: offset {offset}, size {size}")
            body = await reader.readexactly(size) if size > 0 else b""
            if size == REFILL_FRAME:  # the master's tail: we refill it only if ours agrees
                digest = DIGEST.unpack(await reader.readexactly(DIGEST.size))[0]
                if forked(self.store, offset, digest):
                    raise ValueError(f"the master asks for our log from {offset}, but its "
                                     "bytes before that differ from ours: refusing")
            self.frames += 1
            self.execute(self.core.frame(offset, size, body, mono_ms()))

    def execute(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, Append):
                try:
                    end = self.store.append_raw(a.offset, a.data, partial_tail=True)
                except StoreError as e:
                    log.error("HA: the master's bytes at %d do not append: %s", a.offset, e)
                    self._drop()
                    return
                if self.sync_flush:  # a report is an ack: make it mean flushed
                    self.store.commitlog.flush()
                self.execute(self.core.appended(end, mono_ms()))
            elif isinstance(a, Report):
                if self.config.checkpoint:
                    self.write(CHECKPOINT_REPORT.pack(a.offset, self.slave_id, self.epoch))
                elif a.hello:  # with our tail: a master whose log forked refuses us
                    self.write(REPORT.pack(HELLO) +
                               TAIL.pack(a.offset, tail_of(self.store, a.offset)))
                else:
                    self.write(REPORT.pack(a.offset))
            elif isinstance(a, Flush):
                core = self.core
                self.store.flush_wait(a.offset).add_done_callback(
                    lambda _, core=core: self._flushed(core))
            elif isinstance(a, StartAt):
                self.store.start_at(a.offset)
                log.info("HA: empty log starts at the master's last segment, %d", a.offset)
            elif isinstance(a, Disconnect):
                log.warning("HA: leaving master %s: %s", self.connected_to, a.reason)
                self._drop()
            elif isinstance(a, SendLog):
                self._sending = asyncio.create_task(self._send_log(a))
            elif isinstance(a, StoreCheckpoint):
                if self.on_checkpoint is not None:
                    self.on_checkpoint(a.checkpoint)

    def _flushed(self, core: HASlave) -> None:
        """S3: a flush the core asked for finished (or timed out): report what is durable.
        A core of an earlier connection is left alone (the new one began from the store)."""
        if core is self.core and not self._stopped:
            self.execute(core.flushed_to(self.store.commitlog.flushed_offset, mono_ms()))

    async def _send_log(self, a: SendLog) -> None:
        writer = self.writer
        try:
            if writer is not None:
                await send_log(self.store, writer, a.offset, a.end, self.config.transfer_batch)
        except (StoreError, ConnectionError, OSError) as e:
            log.error("HA: cannot send the master our log from %d: %s", a.offset, e)
            if self.writer is writer:
                self._drop()

    def write(self, data: bytes) -> None:
        """To the master, if the link is still open (writing to a closed one raises)."""
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(data)

    def _drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def status(self) -> dict:
        return {"master": self.connected_to, "maxOffset": self.store.commitlog.max_offset,
                "checkpoint": self.core.checkpoint}
