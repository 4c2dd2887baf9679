"""What a gRPC server costs in Python per call and per streamed message, with no broker
behind it (#33's cost model): JSON rows of server CPU µs per unary call and per message of
a server stream (and per unary call with 64 in flight), for grpc.aio (responses yielded, or
written with `context.write`), grpcio's synchronous server on a thread pool, and
ledgermq's own server (ledgermq/grpcserver, what the broker's endpoint runs).

    python bench/grpc_floor.py [--calls 5000] [--streamed 20000]

The server runs in its own process and echoes bytes (identity serializers: no protobuf);
the client is a plain synchronous channel in this process. A broker that answers one
gRPC call per send, and writes one stream message per received message (as RocketMQ 5's
ReceiveMessage does), cannot spend less than these figures on the same machine.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.native_bench import cpu_seconds  # noqa: E402

KINDS = ("aio-yield", "aio-write", "sync-threads", "grpcserver")
STREAMED = b"m" * 200  # about a received message's size on the wire
IN_FLIGHT = 64


def _ident(b: bytes) -> bytes:
    return b


def _handlers(kind: str):
    if kind == "sync-threads":
        def echo(req, ctx):
            return req

        def stream(req, ctx):
            for _ in range(int(req)):
                yield STREAMED
    else:
        async def echo(req, ctx):  # type: ignore[misc]
            return req

        if kind == "aio-yield":
            async def stream(req, ctx):  # type: ignore[misc]
                for _ in range(int(req)):
                    yield STREAMED
        else:
            async def stream(req, ctx):  # type: ignore[misc]
                for _ in range(int(req)):
                    await ctx.write(STREAMED)
    return grpc.method_handlers_generic_handler("floor.F", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo, _ident, _ident),
        "Stream": grpc.unary_stream_rpc_method_handler(stream, _ident, _ident)})


class _Raw(bytes):
    """Bytes as a message class for ledgermq's grpcserver (no protobuf, as the identity
    serializers above)."""

    @classmethod
    def FromString(cls, data: bytes) -> "_Raw":
        return cls(data)

    def SerializeToString(self) -> bytes:
        return bytes(self)


def _grpcserver_methods():
    from ledgermq.grpcserver import Method

    async def echo(req, ctx):
        return req

    async def stream(req, ctx):
        for _ in range(int(req)):
            yield _Raw(STREAMED)
    return {b"/floor.F/Echo": Method(echo, _Raw, False, False),
            b"/floor.F/Stream": Method(stream, _Raw, False, True)}


def serve(kind: str) -> None:
    """The server process: prints its port, serves until stdin closes."""
    if kind == "grpcserver":  # ledgermq's own, on uvloop as the broker runs it
        import uvloop

        from ledgermq.grpcserver import GrpcServer

        async def own() -> None:
            server = GrpcServer(_grpcserver_methods(), max_message=64 << 20, max_streams=1024)
            listener = await asyncio.get_running_loop().create_server(
                server.protocol, "127.0.0.1", 0)
            print(listener.sockets[0].getsockname()[1], flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            listener.close()
            await server.stop(0)
        uvloop.run(own())
        return
    if kind == "sync-threads":
        server = grpc.server(futures.ThreadPoolExecutor(8))
        server.add_generic_rpc_handlers((_handlers(kind),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(port, flush=True)
        sys.stdin.read()
        server.stop(None)
        return

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_handlers(kind),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(None)
    asyncio.run(main())


def measure(kind: str, calls: int, streamed: int) -> list[dict]:
    p = subprocess.Popen([sys.executable, __file__, "--serve", kind], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())  # type: ignore[union-attr]
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        echo = ch.unary_unary("/floor.F/Echo", _ident, _ident)
        stream = ch.unary_stream("/floor.F/Stream", _ident, _ident)
        for _ in range(500):  # warm-up
            echo(b"w" * 100)
        sum(1 for _ in stream(b"2000"))
        rows = []
        c0, lats = cpu_seconds(p.pid), []
        t0 = time.perf_counter()
        for _ in range(calls):
            s = time.perf_counter()
            echo(b"x" * 100)
            lats.append(time.perf_counter() - s)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(p.pid) - c0
        rows.append({"bench": "grpc_floor", "server": kind, "workload": "unary call, one at a time",
                     "n": calls, "per_s": round(calls / wall), "p50_ms":
                     round(statistics.median(lats) * 1e3, 3),
                     "server_cpu_us_each": round(cpu / calls * 1e6, 1)})
        c0, t0 = cpu_seconds(p.pid), time.perf_counter()
        window: list = []
        for _ in range(calls):  # many in flight, as a client's 64 sending threads keep
            window.append(echo.future(b"x" * 100))
            if len(window) >= IN_FLIGHT:
                window.pop(0).result()
        for f in window:
            f.result()
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(p.pid) - c0
        rows.append({"bench": "grpc_floor", "server": kind,
                     "workload": f"unary calls, {IN_FLIGHT} in flight", "n": calls,
                     "per_s": round(calls / wall),
                     "server_cpu_us_each": round(cpu / calls * 1e6, 1)})
        c0, t0 = cpu_seconds(p.pid), time.perf_counter()
        got = sum(1 for _ in stream(str(streamed).encode()))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(p.pid) - c0
        rows.append({"bench": "grpc_floor", "server": kind, "workload": "server stream, 200 B",
                     "n": got, "per_s": round(got / wall),
                     "server_cpu_us_each": round(cpu / got * 1e6, 1)})
        ch.close()
        return rows
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--streamed", type=int, default=20000)
    ap.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve)
        return
    for kind in KINDS:
        for r in measure(kind, a.calls, a.streamed):
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
