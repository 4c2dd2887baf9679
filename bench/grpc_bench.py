"""RocketMQ 5's gRPC endpoint next to remoting, on one `ledgermq dev` broker in the same run
(JSON rows; ratio = gRPC / remoting), the gRPC rows once on the endpoint's port as
configured by default (TLS and plaintext, told apart by a connection's first byte) and
once with it plaintext only (grpc-direct: tlsTestModeEnable=false).

    python bench/grpc_bench.py [--msgs 5000]

Both sides are driven from Python on the same loop type: remoting with ledgermq's client,
gRPC with grpc.aio stubs generated from our .proto (what the API costs, without any
SDK's own overhead). Rows: sync send p50 (one at a time, 100 B), pipelined sends (256 in
flight, one message per request on both sides), and consume-everything (remoting: pull;
gRPC: receive 32 at a time with POP, each batch acked in one AckMessage).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.native_bench import cpu_seconds  # noqa: E402
from bench.single_node_bench import PAYLOAD, arun, pct  # noqa: E402
from ledgermq import Message, Producer, PullConsumer, PullStatus  # noqa: E402
from ledgermq.apis import definition_pb2 as pb  # noqa: E402
from ledgermq.apis import service_pb2 as svc  # noqa: E402
from ledgermq.apis import rpc  # noqa: E402
from ledgermq.client.admin import Admin  # noqa: E402
from tests.dev_process import DevProcess  # noqa: E402

WINDOW = 256
META = [("x-mq-client-id", "bench-grpc")]


class BrokerCpu:
    """The broker process's CPU over a workload (the client runs in this process)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.start()

    def start(self) -> None:
        self.t0 = cpu_seconds(self.pid)

    def per_msg_us(self, n: int) -> float:
        return round((cpu_seconds(self.pid) - self.t0) / n * 1e6, 1)


def row(workload, side, n, secs, cpu: BrokerCpu, lats=None):
    r = {"bench": "grpc", "workload": workload, "side": side, "msgs": n,
         "secs": round(secs, 3), "msgs_per_s": round(n / secs, 1),
         "broker_cpu_us_per_msg": cpu.per_msg_us(n)}
    if lats:
        r["p50_ms"], r["p99_ms"] = pct(lats, 50), pct(lats, 99)
    return r


def grpc_message(topic):
    return pb.Message(topic=pb.Resource(name=topic), body=PAYLOAD, system_properties=
                      pb.SystemProperties(message_id=uuid.uuid4().hex, message_type=pb.NORMAL))


async def remoting_side(ns, n, pid):
    out = []
    async with Producer("bench-remoting", ns, coalesce=False) as p:
        await p.send(Message("BenchRemoting", PAYLOAD))
        lats, t0, cpu = [], time.perf_counter(), BrokerCpu(pid)
        for _ in range(n):
            s = time.perf_counter()
            await p.send(Message("BenchRemoting", PAYLOAD))
            lats.append(time.perf_counter() - s)
        out.append(row("sync send 100B", "remoting", n, time.perf_counter() - t0, cpu, lats))
        sem, t0 = asyncio.Semaphore(WINDOW), time.perf_counter()
        cpu.start()

        async def one():
            async with sem:
                await p.send(Message("BenchRemoting", PAYLOAD))
        await asyncio.gather(*(one() for _ in range(n)))
        out.append(row("pipelined sends", "remoting", n, time.perf_counter() - t0, cpu))
    async with PullConsumer("bench-remoting-c", ns) as c:
        got, t0 = 0, time.perf_counter()
        cpu.start()
        for q in await c.fetch_queues("BenchRemoting"):
            offset = 0
            while True:
                r = await c.pull(q, offset, 32)
                if r.status is not PullStatus.FOUND:
                    break
                got += len(r.messages)
                offset = r.next_begin_offset
        out.append(row("consume everything (32 a request)", "remoting", got,
                       time.perf_counter() - t0, cpu))
    return out


async def grpc_side(endpoint, n, pid, side="grpc"):
    out = []
    async with grpc.aio.insecure_channel(endpoint) as ch:
        stub = rpc.Stub(ch)

        async def send():
            r = await stub.SendMessage(svc.SendMessageRequest(
                messages=[grpc_message("BenchGrpc")]), metadata=META)
            assert r.status.code == pb.OK, r.status
        await send()
        lats, t0, cpu = [], time.perf_counter(), BrokerCpu(pid)
        for _ in range(n):
            s = time.perf_counter()
            await send()
            lats.append(time.perf_counter() - s)
        out.append(row("sync send 100B", side, n, time.perf_counter() - t0, cpu, lats))
        sem, t0 = asyncio.Semaphore(WINDOW), time.perf_counter()
        cpu.start()

        async def one():
            async with sem:
                await send()
        await asyncio.gather(*(one() for _ in range(n)))
        out.append(row("pipelined sends", side, n, time.perf_counter() - t0, cpu))
        got, t0 = 0, time.perf_counter()
        cpu.start()
        group = pb.Resource(name="bench-grpc-c")
        while True:
            handles = []
            async for r in stub.ReceiveMessage(svc.ReceiveMessageRequest(
                    group=group, message_queue=pb.MessageQueue(topic=pb.Resource(
                        name="BenchGrpc")), batch_size=32, invisible_duration={"seconds": 60},
                    long_polling_timeout={"seconds": 1}), metadata=META):
                if r.HasField("message"):
                    handles.append(svc.AckMessageEntry(
                        message_id=r.message.system_properties.message_id,
                        receipt_handle=r.message.system_properties.receipt_handle))
            if not handles:
                break
            got += len(handles)
            ack = await stub.AckMessage(svc.AckMessageRequest(
                group=group, topic=pb.Resource(name="BenchGrpc"), entries=handles),
                metadata=META)
            assert ack.status.code == pb.OK, ack.status
        # the last, empty receive waited its 1 s polling time: not part of the figure
        out.append(row("consume everything (32 a request)", side, got,
                       time.perf_counter() - t0 - 1.0, cpu))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--msgs", type=int, default=5000)
    args = ap.parse_args()
    rows = []
    # "grpc": the endpoint as configured by default, TLS and plaintext on one port (the
    # first byte tells them apart); "grpc-direct": tlsTestModeEnable=false, plaintext only
    for side, conf in (("grpc", {}), ("grpc-direct", {"tlsTestModeEnable": "false"})):
        with tempfile.TemporaryDirectory(prefix="ledgermq-bench-") as d:
            dev = DevProcess(Path(d), {"grpcServerPort": "0",
                                       "mappedFileSizeCommitLog": str(1 << 30), **conf}).start()
            try:
                async def topics():
                    async with Admin(dev.namesrv) as a:
                        for t in ("BenchRemoting", "BenchGrpc"):
                            await a.update_topic(t, read_queues=4, write_queues=4)
                arun(topics())
                if side == "grpc":
                    rows += arun(remoting_side(dev.namesrv, args.msgs, dev.proc.pid))
                rows += asyncio.run(grpc_side(dev.ready["grpc"], args.msgs, dev.proc.pid, side))
            finally:
                dev.stop()
    by = {(r["workload"], r["side"]): r for r in rows}
    for r in rows:
        base = by[(r["workload"], "remoting")]
        if r["side"] != "remoting":
            r["ratio_vs_remoting"] = round(r["msgs_per_s"] / base["msgs_per_s"], 2)
            if "p50_ms" in r:
                r["p50_ratio_vs_remoting"] = round(r["p50_ms"] / base["p50_ms"], 2)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
