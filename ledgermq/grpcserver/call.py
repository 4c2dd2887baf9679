"""One gRPC call on one HTTP/2 stream: the request's messages as they arrive (length-prefixed,
perhaps compressed), the response's headers, messages and trailers as flow control lets them
go, and the handler's view of it (the context: metadata, peer, time left)."""
from __future__ import annotations

import asyncio
import collections
import gzip
import zlib
from typing import TYPE_CHECKING, AsyncIterator

from . import frames as f
from .status import OK_TRAILERS, OPENING_HEADERS, Code, GrpcError, trailers

if TYPE_CHECKING:
    from .connection import Http2Connection
    from .server import Method

MESSAGE_PREFIX = 5  # compressed flag and a 4-byte length before each gRPC message
MAX_QUEUED = 256  # a streaming call's request messages read before its handler takes them


# metadata a handler does not see (grpcio hides them too)
_TRANSPORT_KEYS = frozenset((b"content-type", b"te", b"grpc-timeout", b"grpc-encoding",
                             b"grpc-accept-encoding"))
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


def deadline_of(value: bytes | None, now: float) -> float | None:
    """grpc-timeout ("100m", "3S": at most 8 digits and a unit) -> a loop time, or None."""
    if not value or len(value) > 9 or value[-1:] not in _TIMEOUT_UNITS \
            or not value[:-1].isdigit():
        return None
    return now + int(value[:-1]) * _TIMEOUT_UNITS[value[-1:]]


def _decompress(data: bytes, encoding: bytes, limit: int) -> bytes:
    if encoding == b"gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == b"deflate":
        d = zlib.decompressobj()
    else:
        raise GrpcError(Code.UNIMPLEMENTED, f"message compressed with "
                        f"{encoding.decode('latin-1')!r}: this server reads gzip and deflate")
    try:
        out = d.decompress(data, limit + 1)
    except (zlib.error, gzip.BadGzipFile) as e:
        raise GrpcError(Code.INTERNAL, f"the message does not decompress: {e}") from None
    if len(out) > limit:
        raise GrpcError(Code.RESOURCE_EXHAUSTED,
                        f"the message decompresses to more than {limit} B")
    return out


class Call:
    """A stream's call; also the context its handler is given."""

    def __init__(self, conn: Http2Connection, stream_id: int,
                 headers: list[tuple[bytes, bytes]], now: float):
        self.conn, self.stream_id = conn, stream_id
        self.headers = headers
        self.path = b""
        self.encoding = b"identity"
        timeout = None
        for k, v in headers:
            if k == b":path":
                self.path = v
            elif k == b"grpc-timeout":
                timeout = v
            elif k == b"grpc-encoding":
                self.encoding = v
        self.deadline = deadline_of(timeout, now)
        self.recv_window = conn.settings_window
        self.recv_unacked = 0
        self.send_window = conn.peer_window
        self.inbox = bytearray()  # bytes of a request message not yet whole
        self.held = 0  # of the connection's buffered bytes, this call's
        self.unary = True  # one request message (the server says otherwise when it opens)
        self.taken = 0
        self.requests: collections.deque[tuple[bytes, int]] = collections.deque()  # (, wire B)
        self.request_ended = False
        self.arrived: asyncio.Future[None] | None = None  # a streaming handler waits on it
        self.headers_sent = False
        self.finished = False  # trailers written (or the stream reset)
        self.ending = False  # trailers given, perhaps still waiting for window
        self.pending: collections.deque[tuple[bytes | memoryview, bool]] = collections.deque()
        self.writable: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.method: Method | None = None  # (the server's, found when the call opens)
        self._metadata: dict[str, str] | None = None

    # ---- the context ----------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, str]:
        """The client's metadata (a key sent twice: its last value; a "-bin" key's value as
        sent, base64). (Made at the first ask, kept: not functools.cached_property, which
        takes a lock each time in this Python.)"""
        if self._metadata is None:
            self._metadata = {k.decode("latin-1"): v.decode("latin-1") for k, v in self.headers
                              if k[:1] != b":" and k not in _TRANSPORT_KEYS}
        return self._metadata

    def metadata_value(self, key: str) -> str | None:
        """One key's value in the client's metadata, as `metadata` has it (a key sent
        twice: its last value), without making the whole dict (a call that needs one key
        pays for one)."""
        try:
            want = key.encode("latin-1")
        except UnicodeEncodeError:
            return None  # (no header name can hold it)
        if want[:1] == b":" or want in _TRANSPORT_KEYS:
            return None
        value = None
        for k, v in self.headers:
            if k == want:
                value = v
        return None if value is None else value.decode("latin-1")

    def peer(self) -> str:
        return self.conn.peer

    def time_remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self.conn.loop.time())

    # ---- the request ----------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """DATA's payload: whole messages are queued for the handler."""
        inbox = self.inbox
        inbox += data
        conn = self.conn
        limit = conn.server.max_message
        conn.buffered += len(data)
        self.held += len(data)
        if conn.buffered > conn.server.max_buffered:
            raise f.ConnectionError_(f.ENHANCE_YOUR_CALM, f"over {conn.server.max_buffered} B "
                                     "of requests read and not yet taken")
        while len(inbox) >= MESSAGE_PREFIX:
            size = int.from_bytes(inbox[1:5], "big")
            if size > limit:
                raise GrpcError(Code.RESOURCE_EXHAUSTED, f"a request message of {size} B, "
                                f"more than the {limit} B this server takes")
            if len(inbox) < MESSAGE_PREFIX + size:
                break
            message = bytes(inbox[MESSAGE_PREFIX:MESSAGE_PREFIX + size])
            if inbox[0]:
                message = _decompress(message, self.encoding, limit)
            del inbox[:MESSAGE_PREFIX + size]
            if self.unary and (self.requests or self.taken):
                raise GrpcError(Code.INVALID_ARGUMENT, "a unary call takes one request "
                                "message, not more")
            if len(self.requests) >= MAX_QUEUED:
                raise GrpcError(Code.RESOURCE_EXHAUSTED, f"{MAX_QUEUED} request messages "
                                "sent and not yet read")
            self.requests.append((message, MESSAGE_PREFIX + size))
        self._wake()

    def end_request(self) -> None:
        self.request_ended = True
        self._wake()

    def _wake(self) -> None:
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(None)

    def only_request(self) -> bytes:
        """A unary call's one message (the request has ended)."""
        if len(self.requests) != 1 or self.inbox:
            raise GrpcError(Code.INVALID_ARGUMENT, f"a unary call takes one request message, "
                            f"not {len(self.requests)}" + (" and a partial one"
                                                            if self.inbox else ""))
        return self._take()

    def _take(self) -> bytes:
        message, wire = self.requests.popleft()
        self.taken += 1
        self._release(wire)
        return message

    def _release(self, n: int) -> None:
        n = min(n, self.held)  # (nothing is released twice: the call's end released all)
        self.held -= n
        self.conn.buffered -= n

    async def next_request(self) -> bytes | None:
        """A streaming call's next message; None once the client has ended its side."""
        while not self.requests:
            if self.request_ended:
                if self.inbox:
                    raise GrpcError(Code.INVALID_ARGUMENT, "the request stream ended inside "
                                    "a message")
                return None
            self.arrived = self.conn.loop.create_future()
            await self.arrived
        return self._take()

    # ---- the response ---------------------------------------------------------------
    def send_message(self, payload: bytes) -> None:
        if self.finished or self.ending:
            return  # (the stream was reset, or its trailers are already queued)
        data = b"\x00" + len(payload).to_bytes(4, "big") + payload
        if not self.headers_sent:
            self.headers_sent = True
            self.conn.send(f.frame(f.HEADERS, f.END_HEADERS, self.stream_id, OPENING_HEADERS))
        rest = data if self.pending else self.conn.send_data(self, data)
        if rest:
            self.pending.append((rest, False))
            self.conn.blocked[self.stream_id] = self

    def answer(self, payload: bytes) -> None:
        """A unary call's response and its OK trailers: in one piece where the windows and
        the peer's frame size take the message (most answers), else as send_message and
        finish send them."""
        conn = self.conn
        size = len(payload) + MESSAGE_PREFIX
        if self.headers_sent or self.finished or self.ending or \
                size > min(conn.send_window, self.send_window, conn.peer_frame):
            self.send_message(payload)
            self.finish()
            return
        conn.send_window -= size
        self.send_window -= size
        self.headers_sent = self.ending = True
        conn.send(f.unary_answer(self.stream_id, OPENING_HEADERS, payload, OK_TRAILERS))
        self._closed()

    def finish(self, code: int = 0, message: str = "") -> None:
        """The trailers (after every message still waiting for window): the call is over."""
        if self.finished or self.ending:
            return
        self.ending = True
        block = trailers(code, message, with_headers=not self.headers_sent)
        self.headers_sent = True
        if self.pending:
            self.pending.append((block, True))
        else:
            self._close_with(block)

    def _close_with(self, block: bytes) -> None:
        self.conn.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, self.stream_id, block))
        self._closed()

    def _closed(self) -> None:
        """The trailers are sent: the stream is over on our side."""
        self.finished = True
        if not self.request_ended:  # answered before the client ended its side: it may stop
            self.conn.send(f.rst_stream(self.stream_id, f.NO_ERROR))
        self._release(self.held)
        self.conn.forget(self)

    def drain(self) -> None:
        """Window came: send what waits, as far as it goes."""
        while self.pending:
            data, is_trailers = self.pending[0]
            if is_trailers:
                self.pending.popleft()
                self._close_with(data)
                return
            rest = self.conn.send_data(self, data)
            if rest:
                self.pending[0] = (rest, False)
                return
            self.pending.popleft()
        self.conn.blocked.pop(self.stream_id, None)
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    async def wait_writable(self) -> None:
        """A streaming handler waits here while its messages wait for window, or while the
        client does not read what the connection has written."""
        while self.pending and not self.finished:
            self.writable = self.conn.loop.create_future()
            await self.writable
        await self.conn.wait_drained()

    def reset(self) -> None:
        """The stream is gone (RST_STREAM, or the connection): the handler is cancelled."""
        self.finished = True
        self.pending.clear()
        self._release(self.held)
        self._wake()
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        if self.task is not None:
            self.task.cancel()
