"""One client's HTTP/2 connection (RFC 9113): the frames read off it, its streams, both
directions' flow control, and what it writes back, gathered into one write a loop turn.
A peer that breaks the protocol gets GOAWAY with the reason and is disconnected; one
that breaks a stream's rules gets that stream reset; the server goes on either way."""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from . import frames as f
from .call import Call
from .headers import HeaderBlockError, HeaderDecoder
from .status import GrpcError

if TYPE_CHECKING:
    from .server import GrpcServer

log = logging.getLogger(__name__)

MAX_HEADER_BLOCK = 1 << 16  # a HEADERS block and its CONTINUATIONs, before decoding
LINGER_S = 2.0  # a connection ended for a protocol error reads (and drops) this long
PREFACE_TIMEOUT_S = 10.0  # a client speaks first: one silent this long is closed


def peer_name(addr: tuple[str, int] | None) -> str:
    """A socket address as grpcio's context.peer() writes it."""
    if not addr:
        return "unknown"
    host, port = addr[0], addr[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class Http2Connection(asyncio.Protocol):
    def __init__(self, server: GrpcServer):
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.settings_window = server.stream_window  # what each stream may send us
        self.peer_window = f.DEFAULT_WINDOW  # what we may send each stream, at its start
        self.peer_frame = f.DEFAULT_FRAME_SIZE
        self.send_window = f.DEFAULT_WINDOW  # the connection's, our way
        self.recv_window = server.connection_window  # the connection's, their way
        self.recv_unacked = 0
        self.decoder = HeaderDecoder(max_list_size=MAX_HEADER_BLOCK)
        self.buf = bytearray()
        self.preface_seen = False
        self.calls: dict[int, Call] = {}
        self.buffered = 0  # request bytes read and not yet taken by a handler
        self.blocked: dict[int, Call] = {}  # calls whose messages wait for window
        self.last_stream = 0
        self.continuing: tuple[int, int, bytearray] | None = None  # (stream, flags, block)
        self.out: list[bytes] = []
        self.flushing = False
        self.going_away = False  # GOAWAY sent: no new calls
        self.failed = False  # ended for a protocol error: what arrives is dropped
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.peer = "unknown"

    # ---- asyncio --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = self.server.peer_of(transport)
        self.server.connections.add(self)
        self.silence = self.loop.call_later(PREFACE_TIMEOUT_S, self.transport.close)
        extra = self.server.connection_window - f.DEFAULT_WINDOW
        self.send(f.settings({f.MAX_CONCURRENT_STREAMS: self.server.max_streams,
                              f.INITIAL_WINDOW_SIZE: self.settings_window,
                              f.MAX_FRAME_SIZE: self.server.max_frame,
                              f.MAX_HEADER_LIST_SIZE: MAX_HEADER_BLOCK}) +
                  (f.window_update(0, extra) if extra > 0 else b""))

    def connection_lost(self, exc: Exception | None) -> None:
        self.silence.cancel()
        self.server.connections.discard(self)
        self._drop_all()
        self._wake_drained()

    def pause_writing(self) -> None:
        """The client does not read what we write: read nothing more from it meanwhile."""
        self.paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if not self.transport.is_closing():
            self.transport.resume_reading()
        self._wake_drained()

    def _wake_drained(self) -> None:
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    async def wait_drained(self) -> None:
        while self.paused and not self.transport.is_closing():
            self.drained = self.loop.create_future()
            await self.drained

    # ---- writing --------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.out.append(data)
        if not self.flushing:
            self.flushing = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flushing = False
        if self.out and not self.transport.is_closing():
            self.transport.write(b"".join(self.out))
        self.out.clear()

    def send_data(self, call: Call, data: bytes | memoryview) -> memoryview | None:
        """DATA frames for as much of `data` as both windows allow; the rest is returned."""
        data = memoryview(data)
        while data:
            n = min(len(data), self.send_window, call.send_window, self.peer_frame)
            if n <= 0:
                return data
            self.send(f.frame(f.DATA, 0, call.stream_id, data[:n]))
            self.send_window -= n
            call.send_window -= n
            data = data[n:]
        return None

    def forget(self, call: Call) -> None:
        self.calls.pop(call.stream_id, None)
        self.blocked.pop(call.stream_id, None)
        if self.going_away and not self.calls:
            self.loop.call_soon(self.transport.close)

    def go_away(self, code: int = f.NO_ERROR, why: str = "") -> None:
        """GOAWAY: calls open now go on, no new ones start."""
        if not self.going_away:
            self.going_away = True
            self.send(f.goaway(self.last_stream, code, why))
        if not self.calls:
            self.loop.call_soon(self.transport.close)

    def _fail(self, code: int, why: str) -> None:
        """GOAWAY saying why, then the connection ends. What the peer still sends is read
        and dropped for a moment first: closing with bytes unread would reset the
        connection, and the peer might lose the GOAWAY."""
        log.info("gRPC connection from %s closed: %s", self.peer, why)
        self.going_away = self.failed = True
        self.flush()
        self._drop_all()
        if self.transport.is_closing():
            return
        self.transport.write(f.goaway(self.last_stream, code, why))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    # ---- reading --------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.failed:
            return
        buf = self.buf
        buf += data
        pos = 0
        if not self.preface_seen:
            if len(buf) < len(f.PREFACE):
                if not f.PREFACE.startswith(bytes(buf)):
                    self._fail(f.PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                return
            if buf[:len(f.PREFACE)] != f.PREFACE:
                self._fail(f.PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                return
            self.preface_seen = True
            self.silence.cancel()
            pos = len(f.PREFACE)
        n = len(buf)
        limit = self.server.max_frame
        try:
            while n - pos >= f.HEADER_LEN:
                length = int.from_bytes(buf[pos:pos + 3], "big")
                if length > limit:
                    raise f.ConnectionError_(f.FRAME_SIZE_ERROR, f"a frame of {length} B, "
                                             f"more than SETTINGS_MAX_FRAME_SIZE {limit}")
                end = pos + f.HEADER_LEN + length
                if end > n:
                    break
                kind, flags = buf[pos + 3], buf[pos + 4]
                stream_id = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
                payload = bytes(buf[pos + f.HEADER_LEN:end])
                pos = end
                self._frame(kind, flags, stream_id, payload)
                if self.transport.is_closing():
                    return
        except f.ConnectionError_ as e:
            self._fail(e.code, str(e))
            return
        except Exception as e:  # a fault of ours: this connection ends, the server goes on
            log.exception("gRPC connection from %s", self.peer)
            self._fail(f.INTERNAL_ERROR, f"internal error: {type(e).__name__}")
            return
        del buf[:pos]
        if self.out:  # what this read answered (acks, calls done at once): one write now
            self.flush()

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is not None and kind != f.CONTINUATION:
            raise f.ConnectionError_(f.PROTOCOL_ERROR, "a header block left unfinished")
        if kind == f.DATA:
            self._data(flags, stream_id, payload)
        elif kind == f.HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == f.CONTINUATION:
            self._continuation(flags, stream_id, payload)
        elif kind == f.RST_STREAM:
            if stream_id == 0 or len(payload) != 4:
                raise f.ConnectionError_(f.PROTOCOL_ERROR, "a malformed RST_STREAM")
            self._drop(stream_id)
        elif kind == f.SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == f.PING:
            if stream_id != 0 or len(payload) != 8:
                raise f.ConnectionError_(f.FRAME_SIZE_ERROR, "a malformed PING")
            if not flags & f.ACK:
                self.send(f.frame(f.PING, f.ACK, 0, payload))
        elif kind == f.WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == f.GOAWAY:
            self.go_away()  # the client leaves: its open calls finish, then we close
        elif kind == f.PUSH_PROMISE:
            raise f.ConnectionError_(f.PROTOCOL_ERROR, "a client may not push")
        elif kind == f.PRIORITY and len(payload) != 5:
            self._reset(stream_id, f.FRAME_SIZE_ERROR)
        # PRIORITY otherwise, and frame types this server does not know: ignored (§5.5)

    def _reset(self, stream_id: int, code: int) -> None:
        self.send(f.rst_stream(stream_id, code))
        self._drop(stream_id)

    def _drop(self, stream_id: int) -> None:
        """A stream gone without its trailers: its handler is cancelled."""
        call = self.calls.pop(stream_id, None)
        if call is not None:
            self.blocked.pop(stream_id, None)
            call.reset()

    def _drop_all(self) -> None:
        for stream_id in list(self.calls):
            self._drop(stream_id)

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise f.ConnectionError_(f.PROTOCOL_ERROR, "DATA on stream 0")
        length = len(payload)
        if length > self.recv_window:
            raise f.ConnectionError_(f.FLOW_CONTROL_ERROR, "DATA beyond the connection's "
                                     "window")
        self.recv_window -= length
        self.recv_unacked += length
        if self.recv_unacked >= self.server.connection_window // 2:
            self.send(f.window_update(0, self.recv_unacked))
            self.recv_window += self.recv_unacked
            self.recv_unacked = 0
        call = self.calls.get(stream_id)
        if call is None:
            if stream_id > self.last_stream:
                raise f.ConnectionError_(f.PROTOCOL_ERROR, "DATA on a stream never opened")
            return  # a stream already answered or reset: its late DATA is dropped
        if call.request_ended:
            self._reset(stream_id, f.STREAM_CLOSED)
            return
        if length > call.recv_window:
            self._reset(stream_id, f.FLOW_CONTROL_ERROR)
            return
        call.recv_window -= length
        call.recv_unacked += length
        if call.recv_unacked >= self.settings_window // 2 and not flags & f.END_STREAM:
            self.send(f.window_update(stream_id, call.recv_unacked))
            call.recv_window += call.recv_unacked
            call.recv_unacked = 0
        try:
            call.feed(f.unpadded(flags, payload))
        except GrpcError as e:
            self.server.refuse(call, e)
            return
        if flags & f.END_STREAM:
            self._request_ended(call)

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise f.ConnectionError_(f.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        block = f.header_block(flags, payload)
        if flags & f.END_HEADERS:
            self._header_block(flags, stream_id, block)
        else:
            self.continuing = (stream_id, flags, bytearray(block))

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is None or self.continuing[0] != stream_id:
            raise f.ConnectionError_(f.PROTOCOL_ERROR, "CONTINUATION out of place")
        block = self.continuing[2]
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise f.ConnectionError_(f.ENHANCE_YOUR_CALM, f"a header block over "
                                     f"{MAX_HEADER_BLOCK} B")
        if flags & f.END_HEADERS:
            first_flags = self.continuing[1]
            self.continuing = None
            self._header_block(first_flags, stream_id, bytes(block))

    def _header_block(self, flags: int, stream_id: int, block: bytes) -> None:
        try:  # (decoded even for a stream refused: the table is the connection's)
            headers = self.decoder.decode(block)
        except HeaderBlockError as e:
            raise f.ConnectionError_(f.COMPRESSION_ERROR, f"header block: {e}") from None
        call = self.calls.get(stream_id)
        if call is not None:  # trailers from the client: only to end its side
            if flags & f.END_STREAM:
                self._request_ended(call)
            else:
                self._reset(stream_id, f.PROTOCOL_ERROR)
            return
        if stream_id <= self.last_stream:
            self._reset(stream_id, f.STREAM_CLOSED)
            return
        self.last_stream = stream_id
        if self.going_away:
            self.send(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        if len(self.calls) >= self.server.max_streams:
            self.send(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        call = Call(self, stream_id, headers, self.loop.time())
        self.calls[stream_id] = call
        self.server.open(call)
        if flags & f.END_STREAM:
            self._request_ended(call)

    def _request_ended(self, call: Call) -> None:
        call.end_request()
        if not call.finished:
            self.server.request_ended(call)

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise f.ConnectionError_(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise f.ConnectionError_(f.FRAME_SIZE_ERROR, "a SETTINGS ack with a payload")
            return
        for key, value in f.parse_settings(payload):
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise f.ConnectionError_(f.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE over "
                                             "2^31-1")
                delta, self.peer_window = value - self.peer_window, value
                for call in self.calls.values():
                    call.send_window += delta
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_FRAME_SIZE <= value <= f.MAX_FRAME_SIZE_LIMIT:
                    raise f.ConnectionError_(f.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value}")
                self.peer_frame = value
            elif key == f.ENABLE_PUSH and value > 1:
                raise f.ConnectionError_(f.PROTOCOL_ERROR, f"ENABLE_PUSH {value}")
        self.send(f.SETTINGS_ACK)
        self._drain_blocked()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise f.ConnectionError_(f.FRAME_SIZE_ERROR, "a malformed WINDOW_UPDATE")
        increment = f.u32(payload) & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise f.ConnectionError_(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > f.MAX_WINDOW:
                raise f.ConnectionError_(f.FLOW_CONTROL_ERROR, "the window over 2^31-1")
            self._drain_blocked()
            return
        call = self.calls.get(stream_id)
        if call is None:
            return  # (a stream that has just ended)
        if increment == 0:
            self._reset(stream_id, f.PROTOCOL_ERROR)
            return
        call.send_window += increment
        if call.send_window > f.MAX_WINDOW:
            self._reset(stream_id, f.FLOW_CONTROL_ERROR)
            return
        if call.pending:
            call.drain()

    def _drain_blocked(self) -> None:
        for call in list(self.blocked.values()):
            if self.send_window <= 0:
                return
            call.drain()
