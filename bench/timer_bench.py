"""Timer messages (JSON rows).

    python bench/timer_bench.py [--pending 1000000] [--timers 20000]

  memory    bytes per pending timer with --pending timers in the broker's timer wheel
            (tracemalloc over the wheel's own allocations, delivery times spread over
            3 days as `timerMaxDelaySec` allows)
  lateness  --timers timer messages due over ~5 s sent to a real `ledgermq dev` broker
            while another producer keeps sending plain messages; per delivered message,
            its store time minus its due time (TIMER_OUT_MS), both the broker's clock
Targets (issue #18): little memory per pending timer; p99 lateness within 100 ms.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledgermq import Message, Producer, PullConsumer, PullStatus  # noqa: E402
from ledgermq.broker.delivery.timer import TimerWheel
from tests.dev_process import DevProcess  # noqa: E402


def memory(pending: int) -> dict:
    rnd = random.Random(1)
    now = int(time.time() * 1000)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    w = TimerWheel()
    for qoff in range(pending):
        w.add(now + rnd.randrange(3 * 86_400_000), qoff)
    w.due(now)  # the near part taken out, as a running wheel would
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {"bench": "timer", "workload": "memory", "pending": len(w),
            "bytes": used, "bytes_per_timer": round(used / pending, 1)}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * (len(xs) - 1)))] if xs else None


async def lateness(ns: str, n: int) -> dict:
    stop = asyncio.Event()

    async def background():  # plain sends keep the broker busy meanwhile: ~5,000/s
        sent = 0
        async with Producer("bench-bg", ns) as p:
            while not stop.is_set():
                await asyncio.gather(*(p.send_async(Message("Plain", b"x" * 100))
                                       for _ in range(50)), asyncio.sleep(0.01))
                sent += 50
        return sent
    bg = asyncio.ensure_future(background())
    async with Producer("bench-timer", ns) as p:
        start = int(time.time() * 1000) + 5000  # due from 5 s to 10 s from now
        for k in range(0, n, 500):  # pipelined, 500 in flight
            await asyncio.gather(*(p.send_async(Message(
                "Timed", b"t", deliver_time_ms=start + i * 5000 // n))
                for i in range(k, min(n, k + 500))))
    late = []
    async with PullConsumer("bench-timer-reader", ns) as c:
        offsets: dict = {}
        deadline = time.monotonic() + 60
        while len(late) < n and time.monotonic() < deadline:
            got = 0
            for q in await c.fetch_queues("Timed"):
                r = await c.pull(q, offsets.get(q, 0), 500)
                if r.status is PullStatus.FOUND:
                    late += [m.store_timestamp - int(m.properties["TIMER_OUT_MS"])
                             for m in r.messages]
                    offsets[q] = r.next_begin_offset
                    got += len(r.messages)
            if not got:
                await asyncio.sleep(0.2)
    stop.set()
    plain = await bg
    return {"bench": "timer", "workload": "lateness under load", "timers": n,
            "delivered": len(late), "early": sum(1 for x in late if x < 0),
            "p50_ms": pct(late, 50), "p99_ms": pct(late, 99), "max_ms": max(late, default=None),
            "plain_msgs_meanwhile": plain}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--timers", type=int, default=20_000)
    a = ap.parse_args()
    print(json.dumps(memory(a.pending)), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = DevProcess(Path(tmp)).start()
        try:
            print(json.dumps(asyncio.run(lateness(d.namesrv, a.timers))), flush=True)
        finally:
            d.stop()


if __name__ == "__main__":
    main()
