"""rocketmq_rpc_latency: how long each request took, from the broker's handler receiving it
to its response being queued for writing — for a send in a replicated mode that includes
waiting for the slaves, the quorum or the checkpoint, since the producer waits for it too.

The handler's answer comes in one of three forms (remoting/transport.py): a response now,
a ReplyWhen (a future and how to turn its value into the response) or a coroutine; each is
timed where its response is built. One observation per request, of whatever the request
carried. Installed only while metrics are served: with `metricsPort` 0 the broker's
handler is called bare."""
from __future__ import annotations

from time import perf_counter
from typing import Callable

from ..histogram import Histogram
from ..remoting import RemotingCommand, ReplyWhen

Handler = Callable[[RemotingCommand, object], object]


def timed(handle: Handler, rpc: Histogram) -> Handler:
    """`handle`, recording each request into `rpc` by (protocol, request code, response
    code); a oneway request (no response) is not recorded."""
    observe = rpc.observe

    def handle_timed(cmd: RemotingCommand, conn):
        started = perf_counter()
        reply = handle(cmd, conn)
        protocol = conn.attrs.get("protocol", "remoting")
        kind = type(reply)
        if kind is RemotingCommand:
            observe((protocol, cmd.code, reply.code), (perf_counter() - started) * 1000)
        elif kind is ReplyWhen:
            respond = reply.respond

            def respond_timed(value):
                response = respond(value)
                if response is not None:
                    observe((protocol, cmd.code, response.code),
                            (perf_counter() - started) * 1000)
                return response
            reply.respond = respond_timed
        elif reply is not None:
            return _timed_coroutine(reply, observe, protocol, cmd.code, started)
        return reply
    return handle_timed


async def _timed_coroutine(coro, observe, protocol: str, code: int, started: float):
    response = await coro
    if response is not None:
        observe((protocol, code, response.code), (perf_counter() - started) * 1000)
    return response
