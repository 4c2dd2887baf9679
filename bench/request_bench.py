"""One message per request, as RocketMQ's real clients send (#32): N processes of RocketMQ's
C++ client (PyPI rocketmq==0.4.4) each sending 100-byte messages synchronously from one
thread, against ledgermq (native, then LEDGERMQ_PURE=1), Apache RocketMQ 5 and the floor (a
Python server that answers at once and stores nothing: bench/request_floor.py) in the same
run, on the same 2 cores. JSON rows: msgs/s, sync p50/p99, each server process's CPU per
message and the client processes' together (user + system, over the timed window only);
then, per layout and process count, ledgermq's ratios to RocketMQ and to the floor.

    python bench/request_bench.py [--layouts single,dledger] [--procs 1,4,16]
                                  [--seconds 10] [--systems ledgermq,pure,rocketmq,floor]

Needs the C++ client's venv (`make .cache/rocketmq-0.4.4/.ready`, as make chaos builds it)
and, for the RocketMQ rows, Java (bench/rocketmq_anchor.py fetches RocketMQ from Maven
Central)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.rocketmq_bench import cpu_seconds  # noqa: E402
from bench.rocketmq_sides import Side, side  # noqa: E402

CPP_PYTHON = ROOT / ".cache/rocketmq-0.4.4/bin/python"
SENDER = ROOT / "bench/clients/cpp_sync_sender.py"
TOPIC = "BenchRequests"
WARMUP_S = 4.0  # routes fetched, connections open, the topic created, caches warm


def pct(xs: list[float], p: float) -> float:
    return round(xs[min(len(xs) - 1, int(len(xs) * p))], 3) if xs else 0.0


def run(s: Side, procs: int, seconds: float) -> dict:
    """`procs` sender processes at once; the servers' CPU over the timed window."""
    start = time.time() + WARMUP_S + 1.0 + 0.05 * procs  # every sender started by then
    end = start + seconds
    senders = [subprocess.Popen([str(CPP_PYTHON), str(SENDER), s.namesrv, TOPIC, str(start),
                                 str(end)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True) for _ in range(procs)]
    try:
        pids = s.pids()
        clients = {f"client{i}": p.pid for i, p in enumerate(senders)}
        time.sleep(max(0.0, start - time.time()))  # the measuring window's edges
        before, client_before = cpu_seconds(pids), cpu_seconds(clients)
        time.sleep(max(0.0, end - time.time()))
        after, client_after = cpu_seconds(pids), cpu_seconds(clients)
        results = []
        for p in senders:
            out, _ = p.communicate(timeout=60)
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in senders:
            if p.poll() is None:
                p.kill()
                p.wait()
    msgs = sum(r["msgs"] for r in results)
    lats = sorted(x for r in results for x in r["lat_ms"])
    cpu = {n: after[n] - before[n] for n in after if n in before}
    per = {n: round(c * 1e6 / msgs, 1) if msgs else None for n, c in cpu.items()}
    return {"procs": procs, "msgs": msgs, "failed": sum(r["failed"] for r in results),
            "msgs_per_s": round(msgs / seconds), "p50_ms": pct(lats, 0.5),
            "p99_ms": pct(lats, 0.99), "mean_ms": round(statistics.fmean(lats), 3) if lats
            else 0.0, "cpu_us_per_msg": per,
            "cpu_us_per_msg_total": round(sum(v for v in per.values() if v), 1),
            "client_cpu_us_per_msg": round(sum(client_after[n] - client_before[n]
                                               for n in client_after if n in client_before)
                                           * 1e6 / msgs, 1) if msgs else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", default="single,dledger")
    ap.add_argument("--procs", default="1,4,16")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--systems", default="ledgermq,pure,rocketmq,floor")
    args = ap.parse_args()
    if not CPP_PYTHON.exists():
        sys.exit(f"{CPP_PYTHON} is missing: make .cache/rocketmq-0.4.4/.ready")
    for layout in args.layouts.split(","):
        rows: dict[str, dict[int, dict]] = {}
        for system in args.systems.split(","):
            if system == "floor" and layout != "single":
                continue  # (a group of floors would answer before replicating anything)
            os.environ["LEDGERMQ_PURE"] = "1" if system == "pure" else "0"
            with tempfile.TemporaryDirectory(prefix=f"request-bench-{layout}-") as tmp, \
                    side(system if system in ("rocketmq", "floor") else "ledgermq", layout,
                         Path(tmp)) as s:
                for n in map(int, args.procs.split(",")):
                    row = rows.setdefault(system, {})[n] = run(s, n, args.seconds)
                    print(json.dumps({"bench": "one message per request", "layout": layout,
                                      "system": system, **row}), flush=True)
        for n, ours in rows.get("ledgermq", {}).items():
            for anchor in ("rocketmq", "floor"):
                if n in rows.get(anchor, {}):
                    print(json.dumps({"bench": "one message per request, ratio",
                                      "layout": layout, "procs": n, "anchor": anchor,
                                      **ratios(ours, rows[anchor][n])}), flush=True)


def ratios(ours: dict, theirs: dict) -> dict:
    """ledgermq / the anchor of one row: rate (higher is better), p50 and server CPU a
    message (lower is better)."""
    def r(a, b):
        return round(a / b, 2) if a and b else None
    return {"msgs_per_s": r(ours["msgs_per_s"], theirs["msgs_per_s"]),
            "p50": r(ours["p50_ms"], theirs["p50_ms"]),
            "server_cpu_per_msg": r(ours["cpu_us_per_msg_total"],
                                    theirs["cpu_us_per_msg_total"])}


if __name__ == "__main__":
    main()
