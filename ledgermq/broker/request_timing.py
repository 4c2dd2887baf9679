"""rocketmq_rpc_latency: how long each request took, from the broker's handler receiving it
to its response being queued for writing — for a send in a replicated mode that includes
waiting for the slaves, the quorum or the checkpoint, since the producer waits for it too.

The handler's answer comes in one of three forms (remoting/transport.py): a response now,
a ReplyWhen (a future and how to turn its value into the response) or a coroutine; each is
timed where its response is built. One observation per request, of whatever the request
carried, keyed by one int (`rpc_key`: no tuple allocated on the path every pipelined send
takes), into the histogram of the protocol the request came by. Installed only while
metrics are served: with `metricsPort` 0 the broker's handler is called bare."""
from __future__ import annotations

from bisect import bisect_left
from time import perf_counter
from typing import Awaitable, Callable, cast

from ..metrics.histogram import Histogram
from ..remoting import Connection, RemotingCommand, ReplyWhen
from ..remoting.transport import Handler, Reply

CODE_BITS = 20  # a response code below 2**20 (RocketMQ's are small)
CODE_MASK = (1 << CODE_BITS) - 1


def rpc_key(request_code: int, response_code: int) -> int:
    return request_code << CODE_BITS | (response_code & CODE_MASK)


def rpc_codes(key: int) -> tuple[int, int]:
    return key >> CODE_BITS, key & CODE_MASK


def timed(handle: Handler, rpc: Histogram) -> Handler:
    """`handle`, recording each request into `rpc` by request and response code; a oneway
    request (no response) is not recorded. The immediate answer's observation is
    `Histogram.observe` inlined, with `rpc_key` inlined: it is the pipelined sends' path."""
    observe, bounds, bits, mask = rpc.observe, rpc.bounds, CODE_BITS, CODE_MASK
    series = cast("dict[int, list[float]]", rpc.series)  # (keyed by rpc_key, not tuples)

    def handle_timed(cmd: RemotingCommand, conn: Connection
                     ) -> Reply | Awaitable[Reply] | ReplyWhen:
        started = perf_counter()
        reply = handle(cmd, conn)
        if type(reply) is RemotingCommand:
            ms = (perf_counter() - started) * 1000
            key = cmd.code << bits | (reply.code & mask)
            s = series.get(key) or rpc.new(key)
            s[bisect_left(bounds, ms)] += 1
            s[-1] += ms
        elif type(reply) is ReplyWhen:
            respond = reply.respond

            def respond_timed(value: object) -> RemotingCommand:
                response = respond(value)
                if response is not None:
                    observe(rpc_key(cmd.code, response.code), (perf_counter() - started) * 1000)
                return response
            reply.respond = respond_timed
        elif reply is not None:
            return _timed_coroutine(cast("Awaitable[Reply]", reply), observe, cmd.code,
                                    started)
        return reply
    return handle_timed


async def _timed_coroutine(coro: Awaitable[Reply], observe: Callable[[int, float], None],
                           code: int, started: float) -> Reply:
    response = await coro
    if response is not None:
        observe(rpc_key(code, response.code), (perf_counter() - started) * 1000)
    return response
