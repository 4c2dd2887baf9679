"""asyncio transport for remoting commands: one Connection class serves both ends.

A connection splits incoming bytes into frames, completes the future of a response by its
opaque, and hands requests to a handler (which may return a response, None, an awaitable
of either, or a ReplyWhen). Any frame it cannot parse closes the connection: after a bad
length the stream cannot be resynchronized. Idle connections are closed after
`idle_timeout`.
"""
from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import logging
import socket
import time
from typing import Awaitable, Callable, Union

from .codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from .command import MAX_FRAME_DEFAULT, FrameError, FrameSplitter, RemotingCommand
from .listen import listen
from .tls import DISABLED, Tls

log = logging.getLogger(__name__)


class ReplyWhen:
    """A handler's answer that waits for an event: `respond(future.result())` is the reply,
    built and queued for writing in the future's own done callback (no task, and no loop
    turn between the event and the reply)."""

    __slots__ = ("future", "respond")

    def __init__(self, future: asyncio.Future, respond: Callable[[object], RemotingCommand]):
        self.future = future
        self.respond = respond


Reply = Union[RemotingCommand, None]
Handler = Callable[[RemotingCommand, "Connection"],
                   Union[Reply, Awaitable[Reply], ReplyWhen]]


class RemotingError(Exception):
    """A request that did not get a response (connection lost, timeout, refused)."""


class RemotingTimeout(RemotingError):
    pass


_opaques = itertools.count(1)


def next_opaque() -> int:
    return next(_opaques) & 0x7FFFFFFF


SWEEP_S = 0.05  # how often request deadlines are checked


class JoinedWrites:
    """A TLS transport whose writelines joins its buffers first: the SSL transports
    encrypt each buffer as a TLS record of its own, and a reply is several buffers (a
    pipelined burst, hundreds) while one record holds 16 KB."""

    __slots__ = ("transport",)

    def __init__(self, transport: asyncio.Transport):
        self.transport = transport

    def writelines(self, buffers) -> None:
        self.transport.write(b"".join(buffers))

    def __getattr__(self, name):
        return getattr(self.transport, name)


# requests a peer may have in flight on one connection (handled, not yet answered): past
# it, SYSTEM_BUSY at once; a pipelining client keeps thousands, a hostile one no more
MAX_IN_FLIGHT_DEFAULT = 16384
CORK_BYTES = 256 << 10  # replies gathered from one read are written out at this size


class Connection(asyncio.Protocol):
    def __init__(self, handler: Handler | None, *, max_frame: int = MAX_FRAME_DEFAULT,
                 on_close: Callable[["Connection"], None] | None = None,
                 max_in_flight: int = MAX_IN_FLIGHT_DEFAULT, drop_silent: bool = False):
        """`drop_silent`: abort when a request times out without a byte from the peer for
        the whole timeout (clients: see _expire). Off where closing means something to the
        peer (a broker's link to a name server: its close unregisters the broker)."""
        self.handler = handler
        self.drop_silent = drop_silent
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # requests handled whose answer is not written yet
        self.splitter = FrameSplitter(max_frame)
        self.pending: dict[int, asyncio.Future] = {}
        # (deadline, opaque, code, timeout) of requests out: one sweep instead of a timer
        # per request (pipelined senders keep thousands in flight)
        self._deadlines: list[tuple[float, int, int, float]] = []
        self._sweeping = False
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.last_active = time.monotonic()
        self.closed = asyncio.get_event_loop().create_future()
        self._on_close = on_close
        self.attrs: dict = {}  # per-connection state of the layer above (client id, ...)
        # while the frames of one read are handled, replies collect here and go out in one
        # write (pipelined peers send many frames per read; no reply waits for a later one)
        self._corked: list | None = None
        self._corked_bytes = 0
        self._write_paused = False  # the peer is not reading our writes (pause_writing)
        self._backlog: list = []  # frames read, not handled while writing is paused
        self._gathered: list | None = None  # replies of finished tasks, written together
        self.signer: Callable[[RemotingCommand], None] | None = None  # ACL: signs requests
        self.silent_close_hint = ""  # said when the peer closes before sending anything
        self._born = self.last_active
        self.closed_by_us = False  # else the peer closed it: a sign from it, that late

    # ---- asyncio.Protocol -----------------------------------------------------------
    def connection_made(self, transport) -> None:
        if transport.get_extra_info("sslcontext") is not None:
            transport = JoinedWrites(transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # small frames must not wait for Nagle's algorithm
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            commands = self.splitter.feed(data)
        except FrameError as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        if self._backlog:  # (a read already under way when reading paused)
            self._backlog += commands
        else:
            self._run(commands)

    def _run(self, commands: list) -> None:
        if len(commands) > 1:
            self._corked, self._corked_bytes = [], 0
        try:
            for i, cmd in enumerate(commands):
                if self._write_paused:
                    self._backlog = commands[i:]
                    break
                if cmd.flag & FLAG_RESPONSE:  # (is_response, without the property call)
                    fut = self.pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                else:
                    self._handle(cmd)
                    if self._corked is not None and self._corked_bytes > CORK_BYTES:
                        self._uncork()  # (its write may pause us: the rest waits then)
                        self._corked, self._corked_bytes = [], 0
        finally:
            if self._corked is not None:
                self._uncork()

    def _uncork(self) -> None:
        corked, self._corked = self._corked, None
        if corked and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(corked)

    # A peer that does not read what we answer is no longer read (nor are the requests it
    # already sent handled) until it does: its answers cannot pile up in our memory.
    # asyncio calls these at the transport's high and low water marks.
    def pause_writing(self) -> None:
        self._write_paused = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        backlog, self._backlog = self._backlog, []
        if backlog:
            self._run(backlog)
        if not self._write_paused and self.transport is not None and \
                not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        hint = self.silent_close_hint if self.last_active == self._born else ""
        if not self.closed_by_us:
            self.last_active = time.monotonic()
        err = RemotingError(f"connection to {self.peer} closed{hint}")
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._on_close:
            self._on_close(self)

    # ---- requests in ----------------------------------------------------------------
    def _handle(self, cmd: RemotingCommand) -> None:
        if self.handler is None:
            self.send(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                   f"this endpoint serves no requests (code {cmd.code})"))
            return
        if self.in_flight >= self.max_in_flight:
            self._reply(cmd, cmd.response(
                ResponseCode.SYSTEM_BUSY, f"[TOO_MANY_REQUESTS] {self.in_flight} requests "
                f"of this connection are in flight (at most {self.max_in_flight}): wait for "
                "their answers"))
            return
        try:
            result = self.handler(cmd, self)
        except Exception as e:  # a handler bug must not take the connection down
            log.exception("handler failed on code %s", cmd.code)
            result = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if type(result) is RemotingCommand:
            if not cmd.flag & FLAG_ONEWAY:  # (_reply, inlined: a reply per request)
                self.send(result)
        elif result is None:
            return
        elif type(result) is ReplyWhen:
            self.in_flight += 1
            result.future.add_done_callback(
                lambda f, c=cmd, respond=result.respond: self._reply_from_task(c, f, respond))
        elif inspect.isawaitable(result):
            self.in_flight += 1
            task = asyncio.ensure_future(result)
            task.add_done_callback(lambda t, c=cmd: self._reply_from_task(c, t))
        else:
            self._reply(cmd, result)

    def _reply_from_task(self, cmd: RemotingCommand, task: asyncio.Future,
                         respond: Callable[[object], Reply] | None = None) -> None:
        """Reply once `task` is done: with its result, or with respond(its result)."""
        self.in_flight -= 1
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            try:
                response = task.result() if respond is None else respond(task.result())
            except Exception as e:
                exc = e
        if exc is not None:
            log.error("handler failed on code %s", cmd.code, exc_info=exc)
            response = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is None or cmd.is_oneway or not self.is_open:
            return
        # handlers waiting on one event (a commit, a flush) finish together: their replies
        # are gathered into one write, after the callbacks already queued have run; or at
        # once when no other request of this connection is in flight (nothing to gather,
        # and a loop turn would let other sockets' reads go first)
        if self._gathered is None:
            self._gathered = []
            if self.in_flight:
                asyncio.get_running_loop().call_soon(self._write_gathered)
        self._gathered += response.encode()
        if not self.in_flight:
            self._write_gathered()

    def _write_gathered(self) -> None:
        gathered, self._gathered = self._gathered, None
        if gathered and self.is_open:
            self.transport.writelines(gathered)

    def _reply(self, cmd: RemotingCommand, response: Reply) -> None:
        if response is not None and not cmd.is_oneway:
            self.send(response)

    # ---- requests out ---------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        if self.transport is None or self.transport.is_closing():
            raise RemotingError(f"connection to {self.peer} is closed")
        if self.signer is not None and not cmd.is_response:
            self.signer(cmd)
        if self._corked is not None:
            buffers = cmd.encode()
            self._corked += buffers
            self._corked_bytes += sum(map(len, buffers))
        else:
            self.transport.writelines(cmd.encode())

    def request_future(self, cmd: RemotingCommand, timeout: float) -> asyncio.Future:
        """Send a request; the future gets the response (or RemotingTimeout/RemotingError).
        No task and no timer: pipelined senders pay for a future only."""
        cmd.opaque = opaque = next_opaque()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.pending[opaque] = fut
        heapq.heappush(self._deadlines, (loop.time() + timeout, opaque, cmd.code, timeout))
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(SWEEP_S, self._sweep)
        try:
            self.send(cmd)
        except RemotingError:
            self.pending.pop(opaque, None)
            raise
        return fut

    def _sweep(self) -> None:
        """Fail the requests whose deadline passed (within SWEEP_S of it)."""
        now = asyncio.get_running_loop().time()
        d = self._deadlines
        while d and d[0][0] <= now:
            _, opaque, code, timeout = heapq.heappop(d)
            self._expire(opaque, code, timeout)
        if not self.pending:
            d.clear()  # answered requests leave their deadlines behind
        self._sweeping = bool(d)
        if self._sweeping:
            asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        fut = self.request_future(cmd, timeout)
        try:
            return await fut
        finally:
            self.pending.pop(cmd.opaque, None)

    def _expire(self, opaque: int, code: int, timeout: float) -> None:
        fut = self.pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(RemotingTimeout(
                f"no response from {self.peer} to code {code} within {timeout:.1f}s"))
            if self.drop_silent and self.is_open and \
                    time.monotonic() - self.last_active >= timeout:
                # not a byte from the peer for the whole timeout: the path is likely cut
                # (or the peer hung). Aborted, so the next request connects afresh: a
                # connection whose segments went unanswered retransmits with TCP's growing
                # backoff (seconds) long after the path is back; a new one gets through
                log.debug("closing %s: silent for %.1f s", self.peer, timeout)
                self.silent_close_hint = ""
                self.transport.abort()  # type: ignore[union-attr]  # (open)

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= FLAG_ONEWAY
        self.send(cmd)

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.closed_by_us = True
            self.transport.close()

    def drop_unsent(self) -> None:
        """Close at once if written frames still wait in the transport's buffer, dropping
        them: they may hold views on bytes that are about to change."""
        if self.transport is not None and self.transport.get_write_buffer_size():
            self.closed_by_us = True
            self.transport.abort()


class RemotingServer:
    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0, *,
                 max_frame: int = MAX_FRAME_DEFAULT, idle_timeout: float = 120.0,
                 tls: Tls = DISABLED, what: str = "remoting server",
                 max_in_flight: int = MAX_IN_FLIGHT_DEFAULT):
        """`tls`: plaintext, TLS or both (tls.server.mode); `what` names it in logs."""
        self.handler = handler
        self.max_in_flight = max_in_flight
        self.host, self.port = host, port
        self.tls, self.what = tls, what
        self.max_frame = max_frame
        self.idle_timeout = idle_timeout
        self.connections: set[Connection] = set()
        self._server = None  # asyncio.Server, or listen.SniffingServer with TLS on
        self._reaper: asyncio.Task | None = None

    async def start(self) -> None:
        self._server = await listen(self._new_connection, self.host, self.port, self.tls,
                                    what=self.what)
        self.port = self._server.sockets[0].getsockname()[1]
        self._reaper = asyncio.create_task(self._reap_idle())

    def _new_connection(self) -> Connection:
        conn = Connection(self.handler, max_frame=self.max_frame,
                          on_close=self.connections.discard, max_in_flight=self.max_in_flight)
        self.connections.add(conn)
        return conn

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self.idle_timeout / 4, 10))
            horizon = time.monotonic() - self.idle_timeout
            for conn in list(self.connections):
                if conn.last_active < horizon and not conn.pending:
                    log.info("closing idle connection from %s", conn.peer)
                    conn.close()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        if self._server:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            await self._server.wait_closed()
