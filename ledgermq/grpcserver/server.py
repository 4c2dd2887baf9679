"""A gRPC server on the event loop, HTTP/2 and gRPC's framing read and written here in
Python (grpcio's server and the h2 library each spent 300-450 µs of CPU a unary call on
this machine; this one ~50-55: docs/benchmarks.md, sessions 35-36).

It serves one protobuf service: each method of its descriptor is a servicer's coroutine
(`async def Method(request, context)`), or async generator for a server-streaming method,
whose request is an async iterator of messages for a client-streaming one. The context
gives `metadata` (a dict), `peer()` and `time_remaining()`, as grpc.aio's context does. A
handler ends its call with an error by raising GrpcError; any other exception answers
UNKNOWN and is logged."""
from __future__ import annotations

import asyncio
import collections.abc
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Coroutine, Protocol

from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from .call import Call
from .connection import Http2Connection, peer_name
from .status import Code, GrpcError

log = logging.getLogger(__name__)


class Context(Protocol):
    """What a handler learns of its call (a Call is one)."""

    @property
    def metadata(self) -> dict[str, str]: ...

    def metadata_value(self, key: str) -> str | None: ...

    def peer(self) -> str: ...

    def time_remaining(self) -> float | None: ...


@dataclass(frozen=True)
class Method:
    # (a unary handler answers with its response message, or with it already serialized)
    handler: Callable[..., Any]
    request: Any  # the request's message class
    client_streaming: bool
    server_streaming: bool


def methods_of(service: Any, servicer: object) -> dict[bytes, Method]:
    """":path" -> Method, for the methods of `service` (a ServiceDescriptor) that
    `servicer` has; a call of any other path is answered UNIMPLEMENTED."""
    out = {}
    for m in service.methods:
        handler = getattr(servicer, m.name, None)
        if handler is not None:
            out[f"/{service.full_name}/{m.name}".encode()] = Method(
                handler, message_factory.GetMessageClass(m.input_type), m.client_streaming,
                m.server_streaming)
    return out


class GrpcServer:
    def __init__(self, methods: dict[bytes, Method], *, max_message: int, max_streams: int,
                 stream_window: int = 1 << 20, connection_window: int = 16 << 20,
                 max_frame: int = 1 << 20):
        self.methods = methods
        self.max_message, self.max_streams = max_message, max_streams
        self.stream_window, self.connection_window = stream_window, connection_window
        self.max_frame = max_frame  # the largest frame a client may send us
        # request bytes one connection may have read that no handler has taken yet
        self.max_buffered = max_message + connection_window
        self.connections: set[Http2Connection] = set()

    def protocol(self) -> Http2Connection:
        return Http2Connection(self)

    @staticmethod
    def peer_of(transport: asyncio.BaseTransport) -> str:
        return peer_name(transport.get_extra_info("peername"))

    # ---- calls ----------------------------------------------------------------------
    def open(self, call: Call) -> None:
        """A stream's headers arrived: a streaming request's handler starts now, a unary
        one's when its message is whole (`request_ended`)."""
        call.method = method = self.methods.get(call.path)
        if method is None:
            call.finish(Code.UNIMPLEMENTED, f"method {call.path.decode('latin-1')} not found")
            return
        if method.client_streaming:
            call.unary = False
            call.task = asyncio.ensure_future(self._run(call, method, _requests(call, method)))

    def request_ended(self, call: Call) -> None:
        method = call.method
        if method is None or method.client_streaming:
            return
        try:
            request = method.request.FromString(call.only_request())
        except DecodeError as e:
            call.finish(Code.INVALID_ARGUMENT, f"the request does not parse as "
                        f"{method.request.DESCRIPTOR.full_name}: {e}")
            return
        except GrpcError as e:
            call.finish(e.code, e.message)
            return
        call.task = _eagerly(self._run(call, method, request))

    def refuse(self, call: Call, error: GrpcError) -> None:
        """The request cannot be read (too large, cannot decompress): the call ends."""
        if call.task is not None:
            call.task.cancel()
        call.finish(error.code, error.message)

    async def _run(self, call: Call, method: Method, request: Any) -> None:
        try:
            if method.server_streaming:
                responses = method.handler(request, call)
                try:
                    async for response in responses:
                        if call.finished:
                            break
                        call.send_message(response.SerializeToString())
                        if call.pending or call.conn.paused:
                            await call.wait_writable()
                finally:
                    await responses.aclose()
                call.finish()
            else:
                response = await method.handler(request, call)
                call.answer(response if type(response) is bytes else
                            response.SerializeToString())
        except GrpcError as e:
            call.finish(e.code, e.message)
        except asyncio.CancelledError:
            if not call.finished:  # the server stops: the client is told
                call.finish(Code.UNAVAILABLE, "the server is stopping")
            raise
        except Exception as e:
            log.exception("gRPC %s failed", call.path.decode("latin-1"))
            call.finish(Code.UNKNOWN, f"unexpected {type(e).__name__}: {e}")

    # ---- listening ------------------------------------------------------------------
    async def stop(self, grace_s: float) -> None:
        """GOAWAY to every client; calls still open after `grace_s` are cancelled."""
        for conn in list(self.connections):
            conn.go_away()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(c.calls for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)  # (bounded: grace_s)
        for conn in list(self.connections):
            for call in list(conn.calls.values()):
                if call.task is not None:
                    call.task.cancel()
            conn.flush()
            conn.transport.close()


def _eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Runs a unary call's coroutine at once, in the read that completed its request: most
    answer without waiting (a send on a single node), and their answer then goes out in
    this loop turn, with no task made and no turn between. One that waits becomes a Task
    from where it stands."""
    try:
        awaited = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_Resumed(coro, awaited))


_NOTHING = object()


class _Resumed(collections.abc.Coroutine):  # type: ignore[type-arg]
    """A coroutine already stepped once, for a Task to drive on: the Task's first step is
    given what the coroutine was waiting on (a future, or None for a bare yield), as if it
    had stepped it itself; every later step, a throw (cancellation) and close go to the
    coroutine."""

    __slots__ = ("coro", "awaited")

    def __init__(self, coro: Coroutine[Any, Any, None], awaited: Any):
        self.coro, self.awaited = coro, awaited

    def send(self, value: Any) -> Any:
        if self.awaited is not _NOTHING:
            awaited, self.awaited = self.awaited, _NOTHING
            return awaited
        return self.coro.send(value)

    def throw(self, *exc: Any) -> Any:
        self.awaited = _NOTHING
        return self.coro.throw(*exc)

    def close(self) -> None:
        self.coro.close()

    def __await__(self) -> Any:
        return self


async def _requests(call: Call, method: Method) -> AsyncIterator[Any]:
    """A client-streaming call's messages, decoded, until the client ends its side."""
    while (data := await call.next_request()) is not None:
        try:
            yield method.request.FromString(data)
        except DecodeError as e:
            raise GrpcError(Code.INVALID_ARGUMENT, f"a request does not parse as "
                            f"{method.request.DESCRIPTOR.full_name}: {e}") from None
