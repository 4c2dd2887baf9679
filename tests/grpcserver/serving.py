"""A GrpcServer on its own event loop thread, serving a test servicer of RocketMQ 5's
MessagingService (its descriptor only: no broker behind it), for grpcio clients and raw
sockets in the tests."""
from __future__ import annotations

import asyncio
import threading

import uvloop

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from ledgermq.grpcserver import Code, GrpcError, GrpcServer, methods_of


def ok(message: str) -> pb.Status:
    return pb.Status(code=pb.OK, message=message)


class Servicer:
    """Each method shows one thing a handler can do."""

    def __init__(self):
        self.hanging_cancelled = 0  # AckMessage calls cancelled while they waited

    async def Heartbeat(self, request, context):  # what the context says
        meta = context.metadata
        left = context.time_remaining()
        return svc.HeartbeatResponse(status=ok(
            f"{meta.get('x-mq-client-id')}|{context.peer()}|{left}|{request.group.name[:20]}"))

    async def SendMessage(self, request, context):  # refusals and faults
        topic = request.messages[0].topic.name if request.messages else ""
        if topic == "refuse":
            raise GrpcError(Code.RESOURCE_EXHAUSTED, "naïve refusal: 100% full")
        if topic == "fault":
            raise ValueError("a handler's own bug")
        return svc.SendMessageResponse(status=ok(str(sum(len(m.body)
                                                         for m in request.messages))))

    async def QueryRoute(self, request, context):  # an answer of the topic's length
        return svc.QueryRouteResponse(status=ok("q" * int(request.topic.name or "0")))

    async def ReceiveMessage(self, request, context):  # batch_size messages of N KiB
        size = request.invisible_duration.seconds * 1024
        for i in range(request.batch_size):
            yield svc.ReceiveMessageResponse(status=ok(f"{i:06d}" + "m" * size))

    async def Telemetry(self, requests, context):  # echoes each command
        async for cmd in requests:
            yield svc.TelemetryCommand(status=ok(cmd.status.message))

    async def AckMessage(self, request, context):  # waits until cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.hanging_cancelled += 1
            raise


class ServerThread:
    def __init__(self, **limits):
        self.servicer = Servicer()
        self.limits = {"max_message": 1 << 20, "max_streams": 100, **limits}
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        assert self.ready.wait(10), "the server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, fn, *args):
        """fn(*args) on the server's loop; its result (a coroutine is awaited)."""
        async def run():
            result = fn(*args)
            return await result if asyncio.iscoroutine(result) else result
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def _run(self) -> None:
        async def main():
            self.loop = asyncio.get_running_loop()
            self.stopping = asyncio.Event()
            self.server = GrpcServer(methods_of(rpc.SERVICE, self.servicer), **self.limits)
            listener = await self.loop.create_server(self.server.protocol, "127.0.0.1", 0)
            self.port = listener.sockets[0].getsockname()[1]
            self.ready.set()
            await self.stopping.wait()
            listener.close()
            await self.server.stop(1.0)
        uvloop.run(main())


class InProcessTransport:
    """What a connection writes, in process; closing is remembered."""

    def __init__(self):
        self.written, self.closed = [], False

    def write(self, data):
        self.written.append(data)

    def is_closing(self):
        return self.closed

    def close(self):
        self.closed = True

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 5555) if name == "peername" else default

    def can_write_eof(self):
        return False

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass
