"""Single-node ledgermq against NATS JetStream replicas=1, in the same run (JSON rows).

    python bench/single_node_bench.py [--quick] [--no-anchor] [--flush ASYNC_FLUSH]

Workloads, 100-byte messages, from Python through ledgermq's own client:
  a  sync sends one at a time (p50/p99)
  b  pipelined async sends, up to 1,000 in flight (the producer's default coalescing of
     one event-loop turn's sends, and one request per message)
  c  batch sends of 100 (pipelined, up to 10 batches in flight)
  d  consume everything b wrote (pull, large batches)
The broker is a real `ledgermq dev` process; client and broker share the 2 cores.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.anchor import anchor_phases  # noqa: E402
from ledgermq import Message, Producer, PullConsumer, PullStatus  # noqa: E402
from tests.dev_process import DevProcess  # noqa: E402

PAYLOAD = b"x" * 100


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * (len(xs) - 1)))] * 1000, 3) if xs else None


def row(name, n, secs, lats=None, **extra):
    r = {"bench": "single_node", "workload": name, "msgs": n, "secs": round(secs, 3),
         "msgs_per_s": round(n / secs, 1)}
    if lats:
        r["p50_ms"], r["p99_ms"] = pct(lats, 50), pct(lats, 99)
    r.update(extra)
    return r


async def w_sync(ns, n):
    async with Producer("bench-a", ns) as p:
        await p.send(Message("BenchA", PAYLOAD))
        lats = []
        t0 = time.perf_counter()
        for _ in range(n):
            s = time.perf_counter()
            await p.send(Message("BenchA", PAYLOAD))
            lats.append(time.perf_counter() - s)
        return row("a sync send 100B", n, time.perf_counter() - t0, lats)


async def w_pipelined(ns, n, topic, window=1000, coalesce=True, timed_every=1):
    """Up to `window` sends in flight (send_async futures, like NATS's publish_async).
    By default the producer coalesces the sends of one event-loop turn into batch requests;
    coalesce=False measures one request per message.

    Every send is timed by default, as the NATS anchors time theirs (a clock read, a
    closure and a done callback each); timed_every=N times every Nth send only, 0 none:
    the timing costs the client about what the send itself does (and most of its garbage
    collections), so the producer's own CPU per message is measured without it."""
    async with Producer("bench-b", ns, coalesce=coalesce) as p:
        await p.send(Message(topic, PAYLOAD))
        lats: list[float] = []
        in_flight: deque = deque()
        pc = time.perf_counter

        def track(t0):
            return lambda f: lats.append(pc() - t0)

        t0 = pc()
        for i in range(n):
            if len(in_flight) >= window:
                await in_flight.popleft()
            fut = p.send_async(Message(topic, PAYLOAD))
            if timed_every and i % timed_every == 0:
                fut.add_done_callback(track(pc()))
            in_flight.append(fut)
        await asyncio.gather(*in_flight)
        label = f"b pipelined sends window={window} 100B" + \
            ("" if coalesce else " one request per message (coalesce=False)") + \
            ("" if timed_every == 1 else f" timed_every={timed_every}")
        return row(label, n, pc() - t0, lats)


async def w_batch(ns, n, size=100, window=10):
    async with Producer("bench-c", ns) as p:
        await p.send(Message("BenchC", PAYLOAD))
        sem = asyncio.Semaphore(window)
        batch = [Message("BenchC", PAYLOAD) for _ in range(size)]

        async def one():
            try:
                await p.send_batch(batch)
            finally:
                sem.release()
        t0 = time.perf_counter()
        tasks = []
        for _ in range(n // size):
            await sem.acquire()
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
        return row(f"c batch sends of {size}, {window} in flight, 100B", n,
                   time.perf_counter() - t0)


async def w_consume(ns, topic, expected):
    async with PullConsumer("bench-d", ns) as c:
        queues = await c.fetch_queues(topic)
        got = 0
        t0 = time.perf_counter()

        async def drain(q):
            nonlocal got
            offset = 0
            while True:
                r = await c.pull(q, offset, 4096)
                if r.status is not PullStatus.FOUND:
                    return
                got += len(r.messages)
                offset = r.next_begin_offset
        await asyncio.gather(*(drain(q) for q in queues))
        return row("d pull consume everything b wrote", got, time.perf_counter() - t0,
                   expected=expected)


def arun(coro):
    """Run a workload on uvloop (a ledgermq dependency), as the broker does."""
    try:
        import uvloop
        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def ratio(ours, anchor, key="msgs_per_s"):
    if not anchor or not anchor.get(key):
        return None
    return round(ours[key] / anchor[key], 2)


def compare(row: dict, anchor_row: dict | None, target: str) -> dict:
    """Add the anchor's figure from the same run, the ratio and the target to a row."""
    anchor_row = anchor_row or {}
    if "p50_ms" in row and row["workload"].startswith("a "):
        row["anchor_p50_ms"] = anchor_row.get("p50_ms")
        row["p50_ratio"] = round(row["p50_ms"] / row["anchor_p50_ms"], 2) \
            if row["anchor_p50_ms"] else None
    else:
        row["anchor_msgs_per_s"] = anchor_row.get("msgs_per_s")
        row["ratio"] = ratio(row, anchor_row)
    row["target"] = target
    return row


def workloads(ns: str, na: int, nb: int, anchor: dict) -> list[dict]:
    """Workloads a-d against a running ledgermq (single node or group), each beside the
    anchor's matching phase."""
    return [
        compare(arun(w_sync(ns, na)), anchor.get("a"), "p50 <= 1.0x anchor"),
        compare(arun(w_pipelined(ns, nb, "BenchB")), anchor.get("b"), ">= 2x anchor b"),
        compare(arun(w_pipelined(ns, nb, "BenchB2", coalesce=False)), anchor.get("b"),
                "(not a target: the same without coalescing)"),
        compare(arun(w_batch(ns, nb)), anchor.get("b"), ">= 10x anchor b"),
        compare(arun(w_consume(ns, "BenchB", nb + 1)), anchor.get("d"), ">= 5x anchor d"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--flush", default="ASYNC_FLUSH")
    args = ap.parse_args()
    na, nb = (2000, 20000) if args.quick else (20000, 200000)
    anchor = anchor_phases(1, na, nb, skip=args.no_anchor)
    with tempfile.TemporaryDirectory(prefix="ledgermq-bench-") as d:
        dev = DevProcess(Path(d), {"flushDiskType": args.flush,
                                   "mappedFileSizeCommitLog": str(1 << 30)}).start()
        try:
            rows = workloads(dev.namesrv, na, nb, anchor)
            for r in rows:
                r["flushDiskType"] = args.flush
                print(json.dumps(r), flush=True)
        finally:
            dev.stop()


if __name__ == "__main__":
    main()
