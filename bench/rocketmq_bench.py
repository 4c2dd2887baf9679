"""ledgermq beside Apache RocketMQ 5, layout by layout, both driven by RocketMQ's own Java
client in the same run (#29). JSON rows: each figure for ledgermq and for RocketMQ and their
ratio (ledgermq / RocketMQ; `better` says which way wins), with every server process's CPU
time per message and the layout's RSS.

    python bench/rocketmq_bench.py [--quick] [--layouts single,sync,dledger,controller]
                                   [--trials 10] [--no-failover | --only-failover]

Workloads, 100-byte messages, one system at a time on the same 2 cores:
  sync      one thread, one message a request (BenchDriver.java): p50 and p99
  threads   RocketMQ's benchmark Producer, 64 threads, one message a request
  batch     batches of 100 from 4 threads (BenchDriver.java)
  consume   a lite pull consumer reads everything `batch` wrote
  gRPC      (layout proxy: ledgermq's gRPC endpoint against RocketMQ's proxy in local mode;
            ledgermq behind RocketMQ's proxy in cluster mode against RocketMQ's own broker
            behind the same proxy)
            RocketMQ 5's Java gRPC client (GrpcDriver.java): sync p50/p99, 64 sending
            threads, a SimpleConsumer (receive 32, ack each) and a PushConsumer; and the
            same client against the floor (bench/grpc_floor_broker.py: ledgermq's endpoint
            answering sends, receives and acks from canned answers)
  failover  (dledger, controller) kill -9 of the master or leader under a sync sender, to its
            next SEND_OK, `--trials` times; then every acknowledged message is read back
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.rocketmq_anchor import (driver_argv, grpc_driver_argv,  # noqa: E402
                                   producer_argv, producer_rows)
from bench.rocketmq_sides import Side, side  # noqa: E402
from ledgermq.client.admin import Admin  # noqa: E402
from ledgermq import PullConsumer, PullStatus  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
FAILOVER_LAYOUTS = ("dledger", "controller", "controller-tight")


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """user + system CPU of each process so far."""
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def rss_mb(pids: dict[str, int], key: str) -> float:
    """The sum of one /proc/PID/status figure (VmRSS now, VmHWM peak) over the processes."""
    total = 0
    for pid in pids.values():
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def idle_cores(s: Side, seconds: float) -> float:
    """CPU cores the servers use with no client at all, over `seconds`."""
    pids = s.pids()
    before = cpu_seconds(pids)
    time.sleep(seconds)  # a measuring window, not synchronization
    after = cpu_seconds(pids)
    return round(sum(after[n] - before[n] for n in after if n in before) / seconds, 3)


def timed_run(s: Side, argv: list[str], start: str, end: str,
              timeout: float = 600) -> tuple[str, dict[str, float]]:
    """Run a client to its end; sample the servers' CPU when it prints a line holding
    `start` (its warm-up done) and one holding `end` (its result): that line, and each
    server process's CPU seconds between the two."""
    pids, before = s.pids(), {}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while True:
            line = line_within(proc, timeout)
            if not line:
                raise RuntimeError(f"{argv[-8:]} ended before its result (rc {proc.wait()})")
            if start in line and not before:
                before = cpu_seconds(pids)
            if end in line and before:
                after = cpu_seconds(pids)
                return line, {n: after[n] - before[n] for n in after if n in before}
    finally:
        proc.kill()
        proc.wait()


def per_message(fig: dict, cpu: dict[str, float]) -> dict:
    per = {n: round(c * 1e6 / fig["msgs"], 1) for n, c in cpu.items()}
    return {**fig, "cpu_us_per_msg": per, "cpu_us_per_msg_total": round(sum(per.values()), 1)}


def driven(s: Side, *args: object, grpc: bool = False) -> dict:
    """One BenchDriver.java (or GrpcDriver.java) command, timed from its warm-up's end to
    its result."""
    argv = grpc_driver_argv(*args) if grpc else driver_argv(*args)
    line, cpu = timed_run(s, argv, '"timed"', '"workload"')
    return per_message(json.loads(line), cpu)


def threads64(s: Side, quantity: int) -> dict:
    """RocketMQ's benchmark Producer with 64 threads, one message a request."""
    argv = producer_argv(s.namesrv, topic="BenchThreads", threads=64, quantity=quantity)
    line, cpu = timed_run(s, argv, "threadCount", "[Complete]")
    (row,) = producer_rows(line)
    return per_message({"msgs": row["total"], "msgs_per_s": row["tps"],
                        "avg_rt_ms": row["avg_rt_ms"],
                        "failed": row["send_failed"] + row["response_failed"]}, cpu)


def workloads(s: Side, quick: bool) -> dict[str, dict]:
    n_sync, n_threads, n_batch = (2000, 20_000, 50_000) if quick else (10_000, 100_000, 300_000)
    ns = s.namesrv
    # the same warm-up on both (a fresh JVM compiles and finishes booting for ~10 s), then
    # what the servers burn doing nothing
    timed_run(s, producer_argv(ns, topic="BenchWarmup", threads=16, quantity=5000),
              "threadCount", "[Complete]")
    out = {"idle": {"rss_mb": rss_mb(s.pids(), "VmRSS"), "cpu_cores": idle_cores(s, 5.0)}}
    out["sync"] = driven(s, "sync", ns, "BenchSync", n_sync, 100)
    out["threads"] = threads64(s, n_threads)
    out["batch"] = driven(s, "batch", ns, "BenchBatch", n_batch, 100, 100, 4)
    written = out["batch"]["msgs"] + out["batch"]["warmup_msgs"]
    out["consume"] = driven(s, "consume", ns, "BenchBatch", "bench-consume", written)
    out["load"] = {"rss_mb": rss_mb(s.pids(), "VmHWM")}
    return out


def grpc_workloads(s: Side, quick: bool) -> dict[str, dict]:
    """RocketMQ 5's Java gRPC client against ledgermq's endpoint or RocketMQ's proxy: sync
    sends, 64 sending threads, then a SimpleConsumer (receive 32, ack each) and a
    PushConsumer each reading everything the threads wrote."""
    n_sync, n_threads = (2000, 20_000) if quick else (10_000, 100_000)

    async def create() -> None:  # gRPC producers need their topic, consumers their group
        async with Admin(s.namesrv) as admin:  # (RocketMQ's proxy makes neither)
            for topic in ("GrpcWarmup", "GrpcSync", "GrpcThreads"):
                await admin.update_topic(topic, read_queues=4, write_queues=4)
            for way in ("receive", "push"):
                await admin.update_sub_group({"groupName": f"grpc-{way}"})
    asyncio.run(create())
    driven(s, "threads", s.grpc, "GrpcWarmup", 5000, 100, 16, grpc=True)
    out = {"idle": {"rss_mb": rss_mb(s.pids(), "VmRSS"), "cpu_cores": idle_cores(s, 5.0)}}
    out["sync"] = driven(s, "sync", s.grpc, "GrpcSync", n_sync, 100, grpc=True)
    out["threads"] = driven(s, "threads", s.grpc, "GrpcThreads", n_threads, 100, 64, grpc=True)
    written = n_threads + out["threads"]["warmup_msgs"]
    for way in ("receive", "push"):
        out[way] = driven(s, way, s.grpc, "GrpcThreads", f"grpc-{way}", written, grpc=True)
    out["load"] = {"rss_mb": rss_mb(s.pids(), "VmHWM")}
    return out


def line_within(proc: subprocess.Popen, seconds: float) -> str:
    """The next line `proc` prints, or fail after `seconds`."""
    assert proc.stdout
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    if not ready:
        raise RuntimeError(f"no line from {proc.args[-4]} within {seconds:.0f} s")
    return proc.stdout.readline()


def java_sender(namesrv: str, topic: str, acked_file: Path) -> list[str]:
    return driver_argv("failover", namesrv, topic, acked_file)


def failover(s: Side, trials: int, work: Path,
             sender_argv: Callable[[str, str, Path], list[str]] = java_sender) -> dict:
    """kill -9 of the master `trials` times under one sync sender (`sender_argv`: the
    command line of a client speaking BenchDriver.java's failover protocol); the seconds
    from each kill to the sender's next SEND_OK; then the acknowledged messages read back."""
    acked_file = work / f"{s.system}-acked.txt"
    sender = subprocess.Popen(sender_argv(s.namesrv, "BenchFailover", acked_file),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    times, killed = [], []
    try:
        assert sender.stdout and sender.stdin
        if "ready" not in line_within(sender, 120):
            raise RuntimeError("the failover sender never got a SEND_OK")
        for _ in range(trials):
            killed.append(s.kill_master())
            sender.stdin.write("\n")
            sender.stdin.flush()
            times.append(json.loads(line_within(sender, 120))["first_ok_after_mark_s"])
            s.restart(killed[-1])
            s.wait_whole()
        sender.stdin.close()
        sender.wait(60)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    acked = set(acked_file.read_text().split())
    read, passed = read_back(s.namesrv, acked)
    lost = sorted(acked - read, key=int)
    return {"trials": len(times), "p50_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3), "all_s": times, "killed": killed,
            "acked": len(acked), "lost": len(lost), "lost_first": lost[:20],
            "offsets_without_message": passed}


def read_back(namesrv: str, acked: set[str], patience: float = 60.0) -> tuple[set[str], int]:
    """The numbered bodies in every queue the route names, read from offset 0 to its end as
    a consumer reads (past an answer without messages whose next offset moves on), until
    every acknowledged one is there or `patience` ran out: a new leader may still be
    building its consume queues from its log. Also: how many queue offsets were passed
    over without a message."""
    end = time.monotonic() + patience
    while True:
        try:
            read, passed = asyncio.run(read_topic(namesrv, "BenchFailover"))
        except Exception:  # no route yet, or the master moved while reading: again
            if time.monotonic() > end:
                raise
            read, passed = set(), 0
        if acked <= read or time.monotonic() > end:
            return read, passed
        time.sleep(1)  # polling with a deadline


async def read_topic(namesrv: str, topic: str) -> tuple[set[str], int]:
    async with PullConsumer("bench-reader", namesrv) as c:
        read, passed = set(), 0
        for q in await c.fetch_queues(topic):
            offset = 0
            for _ in range(1_000_000):
                r = await c.pull(q, offset, 32)
                if r.status is PullStatus.FOUND:
                    read |= {m.body.decode().strip() for m in r.messages}
                elif r.next_begin_offset > offset and offset < r.max_offset:
                    passed += r.next_begin_offset - offset
                else:
                    break
                offset = r.next_begin_offset
        return read, passed


def compare(layout: str, workload: str, figure: str, ours, theirs, better: str) -> dict:
    ratio = round(ours / theirs, 3) if ours and theirs else None
    return {"bench": "rocketmq side by side", "layout": layout, "workload": workload,
            "figure": figure, "better": better, "ratio": ratio, "ledgermq": ours,
            "rocketmq": theirs}


def rows(layout: str, figs: dict[str, dict], ours: str = "ledgermq",
         anchor: str = "rocketmq") -> list[dict]:
    """`ours` (ledgermq, or ledgermq behind RocketMQ's proxy) against `anchor` (RocketMQ
    in the same layout, or its broker behind the same proxy)."""
    if not figs.get(anchor, {}).get("sync"):  # (not run: --systems)
        return []
    return [{**r, "side": ours, "anchor": anchor}
            for r in _rows(layout, figs[ours], figs[anchor])]


def _rows(layout: str, a: dict, b: dict) -> list[dict]:
    out = [compare(layout, "sync", f, a["sync"][f], b["sync"][f], "lower")
           for f in ("p50_ms", "p99_ms")]
    moved = [w for w in ("threads", "batch", "consume", "receive", "push") if w in a]
    for w in moved:
        out.append(compare(layout, w, "msgs_per_s", a[w]["msgs_per_s"], b[w]["msgs_per_s"],
                           "higher"))
    for w in ("sync", *moved):
        row = compare(layout, w, "cpu_us_per_msg_total", a[w]["cpu_us_per_msg_total"],
                      b[w]["cpu_us_per_msg_total"], "lower")
        row["per_process"] = {"ledgermq": a[w]["cpu_us_per_msg"],
                              "rocketmq": b[w]["cpu_us_per_msg"]}
        out.append(row)
    for state in ("idle", "load"):
        out.append(compare(layout, state, "rss_mb", a[state]["rss_mb"], b[state]["rss_mb"],
                           "lower"))
    out.append(compare(layout, "idle", "cpu_cores", a["idle"]["cpu_cores"],
                       b["idle"]["cpu_cores"], "lower"))
    return out


def failover_rows(layout: str, figs: dict[str, dict]) -> list[dict]:
    a, b = figs.get("ledgermq", {}).get("failover"), figs.get("rocketmq", {}).get("failover")
    if not (a and b):
        return []
    return [compare(layout, "failover", f, a[f], b[f], "lower")
            for f in ("p50_s", "max_s", "lost")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--layouts",
                    default="single,proxy,sync,dledger,controller,controller-tight")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--no-failover", action="store_true")
    ap.add_argument("--only-failover", action="store_true",
                    help="the failover rows alone (the other workloads are skipped)")
    ap.add_argument("--systems", help="a subset of the layout's systems, comma-separated "
                    "(proxy: ledgermq,rocketmq,proxied,rocketmq-proxied,grpc-floor)")
    args = ap.parse_args()
    for layout in args.layouts.split(","):
        figs: dict[str, dict] = {}
        # the proxy layout also runs ledgermq, and RocketMQ's broker, behind RocketMQ's
        # proxy in cluster mode, and the floor under the Java client on ledgermq's endpoint
        systems = ("ledgermq", "rocketmq", "proxied", "rocketmq-proxied", "grpc-floor") \
            if layout == "proxy" else ("ledgermq", "rocketmq")
        if args.systems:
            systems = tuple(s for s in systems if s in args.systems.split(","))
        with tempfile.TemporaryDirectory(prefix=f"rocketmq-bench-{layout}-") as tmp:
            for system in systems:
                # (controller-tight: failover rows only; ledgermq has one setting, run again)
                with side(system, layout, Path(tmp) / system) as s:
                    figs[system] = {} if layout == "controller-tight" or \
                        args.only_failover else grpc_workloads(s, args.quick) \
                        if layout == "proxy" else workloads(s, args.quick)
                    if layout in FAILOVER_LAYOUTS and not args.no_failover:
                        figs[system]["failover"] = failover(s, args.trials, Path(tmp))
                print(json.dumps({"bench": "rocketmq side by side", "layout": layout,
                                  "system": system, **figs[system]}), flush=True)
        compared = [r for ours in ("ledgermq", "proxied") if figs.get(ours, {}).get("sync")
                    for r in rows(layout, figs, ours)]
        if figs.get("rocketmq-proxied", {}).get("sync"):
            compared += rows(layout, figs, "proxied", "rocketmq-proxied")
        if figs.get("grpc-floor", {}).get("sync"):  # how far above the floor ledgermq is
            compared += rows(layout, figs, "ledgermq", "grpc-floor")
        for r in compared + failover_rows(layout, figs):
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
