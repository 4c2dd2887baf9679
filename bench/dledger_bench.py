"""A 3-replica DLedger group against NATS JetStream replicas=3, in the same run (JSON rows).

    python bench/dledger_bench.py [--quick] [--no-anchor] [--trials 10]

Workloads (100-byte messages, Python client, everything on the same 2 cores): pipelined
single sends (1,000 in flight), batch sends of 100, sync sends one at a time (p50/p99),
consume everything; then failover: kill -9 of the leader to the first SEND_OK on the new
leader, `--trials` times (the killed node is restarted and caught up between trials).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.anchor import anchor_phases  # noqa: E402
from bench.single_node_bench import arun, workloads  # noqa: E402
from ledgermq import Message, MQClientError, Producer  # noqa: E402
from ledgermq.localcluster.cluster import down, restart, status, up
from ledgermq.remoting import RemotingError  # noqa: E402


def leader(d: Path, timeout: float = 20.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ls = [p for p in status(d)["processes"] if p.get("role") == "LEADER" and p["alive"]]
        if len(ls) == 1:
            return ls[0]
        time.sleep(0.1)
    raise RuntimeError("no leader")


async def first_ok_after_kill(ns: str, victim_pid: int) -> float:
    async with Producer("failover", ns, retry_times=0, send_timeout=1) as p:
        await p.send(Message("Failover", b"warm"))
        os.kill(victim_pid, signal.SIGKILL)
        t0 = time.perf_counter()
        while True:
            try:
                r = await p.send(Message("Failover", b"probe"))
                if r.status.value == "SEND_OK":
                    return time.perf_counter() - t0
            except (MQClientError, RemotingError):
                await asyncio.sleep(0.01)
            if time.perf_counter() - t0 > 30:
                raise RuntimeError("no SEND_OK within 30 s of the kill")


def caught_up(d: Path, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ps = [p for p in status(d)["processes"] if p["name"] != "namesrv"]
        if all(p["alive"] and "commit" in p for p in ps) and \
                len({p["commit"] for p in ps}) == 1:
            return
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    na, nb = (1000, 20000) if args.quick else (10000, 100000)
    anchor = anchor_phases(3, na, nb, skip=args.no_anchor)
    with tempfile.TemporaryDirectory(prefix="ledgermq-dledger-") as tmp:
        d = Path(tmp) / "group"
        state = up("dledger", 3, d)
        ns = state["namesrv"]
        try:
            leader(d)
            rows = workloads(ns, na, nb, anchor)
            for r in rows:
                r["bench"] = "dledger replicas=3"
                print(json.dumps(r), flush=True)
            times = []
            for _ in range(args.trials):
                victim = leader(d)
                times.append(arun(first_ok_after_kill(ns, victim["pid"])))
                restart(d, victim["name"])
                caught_up(d)
            print(json.dumps({"bench": "dledger replicas=3", "workload": "failover: kill -9 "
                              "leader -> first SEND_OK", "trials": len(times),
                              "p50_s": round(sorted(times)[len(times) // 2], 3),
                              "max_s": round(max(times), 3),
                              "all_s": [round(t, 3) for t in times],
                              "target": "p50 <= 1 s, max <= 3 s"}), flush=True)
        finally:
            down(d)


if __name__ == "__main__":
    main()
