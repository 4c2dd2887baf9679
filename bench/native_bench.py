"""The compiled wire path beside its pure-Python twins and both NATS JetStream anchors, in
one run (JSON rows): a single node against NATS R1, a 3-replica DLedger group against
NATS R3, and the store alone (batch append; SYNC_FLUSH group commit, 64 writers vs 1).

    python bench/native_bench.py [--quick] [--no-anchor] [--no-go] [--setups single,dledger]
                                 [--no-store]

For each setup and implementation (native, then LEDGERMQ_PURE=1) a worker process starts
fresh brokers with that environment and runs the workloads of bench/single_node_bench.py
from its own client: a sync send p50, pipelined single sends (the producer's default
coalescing, each send timed as the anchors time theirs; the same untimed, for the
producer's own CPU a message; and one request per message), batches of 100 x 100 B,
consume everything.
Each row carries the CPU each process spent per message (client: getrusage; every broker:
/proc/PID/stat, before and after the workload; in DLedger the leader and each follower).
The anchors run on one fresh NATS cluster per setup (replicas=1 or 3) in the same run:
nats-py (bench.py) and the native Go client (gobench/, built offline by its build.sh; the
row says why when it cannot be).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.anchor import build_go_client, by_phase, run_anchor  # noqa: E402
from bench.single_node_bench import (  # noqa: E402
    arun, w_batch, w_consume, w_pipelined, w_sync,
)
from tests.dev_process import DevProcess  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measured(pids: dict[str, int], run) -> dict:
    """Run one workload; add the CPU microseconds per message of the client and of each
    broker process in `pids`."""
    c0, b0 = own_cpu_seconds(), {k: cpu_seconds(p) for k, p in pids.items()}
    row = arun(run())
    c1, b1 = own_cpu_seconds(), {k: cpu_seconds(p) for k, p in pids.items()}
    n = max(row["msgs"], 1)
    row["cpu_us_per_msg"] = {"client": round((c1 - c0) * 1e6 / n, 2),
                             **{k: round((b1[k] - b0[k]) * 1e6 / n, 2) for k in pids}}
    return row


# key, what the table calls it, workload
def workloads(ns: str, na: int, nb: int):
    return [
        ("a", "sync send p50", lambda: w_sync(ns, na)),
        ("b", "pipelined single sends (coalesced per loop turn)",
         lambda: w_pipelined(ns, nb, "BenchB")),
        ("b0", "pipelined single sends (coalesced), untimed: the producer's own CPU",
         lambda: w_pipelined(ns, nb, "BenchB0", timed_every=0)),
        ("b1", "pipelined single sends, one request each",
         lambda: w_pipelined(ns, nb // 4, "BenchB1", coalesce=False)),
        ("c", "batches of 100 x 100 B", lambda: w_batch(ns, nb)),
        ("d", "consume everything", lambda: w_consume(ns, "BenchB", nb + 1)),
    ]


class Single:
    """One `ledgermq dev` process (name server and broker)."""

    def __init__(self, d: Path):
        self.dev = DevProcess(d, {**ASYNC, "mappedFileSizeCommitLog": str(1 << 30)}).start()
        self.namesrv = self.dev.namesrv
        self.pids = {"broker": self.dev.proc.pid}

    def stop(self) -> None:
        self.dev.stop()


class DLedgerGroup:
    """Three DLedger brokers and a name server (`cluster up`), their pids by role."""

    def __init__(self, d: Path):
        from bench.dledger_bench import leader
        from ledgermq.localcluster.cluster import status, up
        self.d = d / "group"
        self.namesrv = up("dledger", 3, self.d, dict(ASYNC))["namesrv"]
        lead = leader(self.d)
        followers = [p for p in status(self.d)["processes"]
                     if p["name"] != "namesrv" and p["pid"] != lead["pid"]]
        self.pids = {"leader": lead["pid"],
                     **{f"follower{i + 1}": p["pid"] for i, p in enumerate(followers)}}

    def stop(self) -> None:
        from ledgermq.localcluster.cluster import down
        down(self.d)


ASYNC = {"flushDiskType": "ASYNC_FLUSH"}
SETUPS = {"single": (Single, 1), "dledger": (DLedgerGroup, 3)}  # and NATS's replicas


def worker(setup: str, na: int, nb: int) -> None:
    """One setup and implementation (as LEDGERMQ_PURE says): fresh brokers, every workload."""
    from ledgermq.wire import native
    with tempfile.TemporaryDirectory(prefix="ledgermq-bench-") as d:
        brokers = SETUPS[setup][0](Path(d))
        try:
            for key, name, run in workloads(brokers.namesrv, na, nb):
                row = measured(brokers.pids, run)
                row.update(key=key, figure=name, impl=native.active())
                print(json.dumps(row), flush=True)
        finally:
            brokers.stop()


def run_worker(setup: str, pure: bool, na: int, nb: int) -> dict[str, dict]:
    env = {**os.environ, "LEDGERMQ_PURE": "1" if pure else "0"}
    out = subprocess.run([sys.executable, __file__, "--worker", setup, "--na", str(na),
                          "--nb", str(nb)], env=env, capture_output=True, text=True, check=True,
                         timeout=1800).stdout
    return {r["key"]: r for r in map(json.loads, out.splitlines())}


def run_store(pure: bool, quick: bool, only: str) -> dict:
    """bench/store_bench.py in one process: `append` (1,000 x 100 B a batch, ASYNC_FLUSH:
    msgs/s and the whole run's CPU per message) or `group` (SYNC_FLUSH group commit)."""
    env = {**os.environ, "LEDGERMQ_PURE": "1" if pure else "0"}
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "store_bench.py"), "--only",
                          only] + (["--quick"] if quick else []), env=env,
                         capture_output=True, text=True, check=True, timeout=1800).stdout
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = json.loads(out.splitlines()[-1])
    if "messages" in row:
        cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
        row["cpu_us_per_msg_whole_run"] = round(cpu * 1e6 / row["messages"], 2)
    return row


def figure(row: dict | None, key: str) -> float | None:
    """msgs/s, or p50 ms for the sync workload."""
    if not row:
        return None
    return row.get("p50_ms") if key == "a" else row.get("msgs_per_s")


def ratio(ours: float | None, anchor: float | None, key: str) -> float | None:
    """How many times the anchor: throughput ours/anchor; for p50, ours/anchor (lower is
    better)."""
    if not ours or not anchor:
        return None
    return round(ours / anchor, 2)


def go_cpu_per_msg(row: dict | None) -> dict | None:
    """The Go anchor's per-process CPU (% of a core over the phase) as µs per message:
    the servers (n1..n3) and its client; other_procs says what else ran meanwhile."""
    if not row or not isinstance(row.get("cpu_pct"), dict) or not row.get("msgs_per_s"):
        return None
    cpu = row["cpu_pct"]
    out = {k: round(v / 100 / row["msgs_per_s"] * 1e6, 2) for k, v in cpu.items()
           if k in ("n1", "n2", "n3", "client") and v}
    out["other_procs_pct"] = cpu.get("other_procs")
    return out


# (b0 has no anchor: the anchors time every publish, as b does)
ANCHOR_PHASE = {"a": "a", "b": "b", "b0": None, "b1": "b", "c": "b", "d": "d"}


def anchors(replicas: int, args, na: int, nb: int) -> tuple[dict, dict, str]:
    """nats-py's and the Go client's rows by phase on one fresh NATS cluster."""
    if args.no_anchor:
        return {}, {}, "skipped (--no-anchor)"
    go_bin, go_note = None, "skipped (--no-go)"
    if not args.no_go:
        go_bin, why = build_go_client()
        go_note = "built" if go_bin else why
    rows = run_anchor(replicas, "a,b,d", nb=nb, na=na, go=go_bin)
    for r in rows:
        print(json.dumps({"bench": f"anchor nats-jetstream replicas={replicas}", **r}),
              flush=True)
    return (by_phase([r for r in rows if r.get("client") != "go"]),
            by_phase([r for r in rows if r.get("client") == "go"]), go_note)


def compare_setup(setup: str, args, na: int, nb: int) -> None:
    nats_py, go, go_note = anchors(SETUPS[setup][1], args, na, nb)
    ours = {"native": run_worker(setup, False, na, nb), "pure": run_worker(setup, True, na, nb)}
    for key in ("a", "b", "b0", "b1", "c", "d"):
        nat, pure = ours["native"].get(key), ours["pure"].get(key)
        phase = ANCHOR_PHASE[key]
        f_nat, f_pure = figure(nat, key), figure(pure, key)
        a_py, a_go = figure(nats_py.get(phase), key), figure(go.get(phase), key)
        unit = "p50_ms" if key == "a" else "msgs_per_s"
        print(json.dumps({
            "bench": f"native {setup}", "figure": nat["figure"], "unit": unit,
            "native": f_nat, "pure": f_pure, "native_over_pure": ratio(f_nat, f_pure, key),
            "native_impl": nat["impl"], "pure_impl": pure["impl"],
            "anchor_nats_py": a_py, "anchor_go": a_go, "go_client": go_note,
            "ratio_vs_nats_py": {"native": ratio(f_nat, a_py, key),
                                 "pure": ratio(f_pure, a_py, key)},
            "ratio_vs_go": {"native": ratio(f_nat, a_go, key), "pure": ratio(f_pure, a_go, key)},
            "cpu_us_per_msg": {"native": nat["cpu_us_per_msg"], "pure": pure["cpu_us_per_msg"],
                               "anchor_go": go_cpu_per_msg(go.get(phase))},
            "p99_ms": {"native": nat.get("p99_ms"), "pure": pure.get("p99_ms")},
        }), flush=True)


def compare_store(quick: bool) -> None:
    store = {"native": run_store(False, quick, "append"), "pure": run_store(True, quick, "append")}
    print(json.dumps({
        "bench": "native store", "figure": "store batch append, 100 B, ASYNC_FLUSH",
        "unit": "msgs_per_s", "native": store["native"]["msgs_per_s"],
        "pure": store["pure"]["msgs_per_s"],
        "native_over_pure": ratio(store["native"]["msgs_per_s"], store["pure"]["msgs_per_s"], ""),
        "target": ">= 3M msgs/s on one core",
        "cpu_us_per_msg_whole_run": {k: v["cpu_us_per_msg_whole_run"] for k, v in store.items()},
        "note": "the whole run's CPU (process start, the disk anchor's writes) over its messages",
    }), flush=True)
    group = {"native": run_store(False, quick, "group"), "pure": run_store(True, quick, "group")}
    print(json.dumps({
        "bench": "native store", "figure": "SYNC_FLUSH group commit, 64 writers vs 1",
        "unit": "ratio to 1 writer with an fsync per message (same run, alternating slices)",
        "native": group["native"]["ratio"], "pure": group["pure"]["ratio"],
        "msgs_per_s": {k: v["msgs_per_s"] for k, v in group.items()},
        "anchor_msgs_per_s": {k: v["anchor_msgs_per_s"] for k, v in group.items()},
        "p50_ms": {k: v["p50_ms"] for k, v in group.items()}, "target": ">= 30x",
    }), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--no-go", action="store_true")
    ap.add_argument("--no-store", action="store_true")
    ap.add_argument("--setups", default="single,dledger")
    ap.add_argument("--worker", choices=sorted(SETUPS))
    ap.add_argument("--na", type=int)
    ap.add_argument("--nb", type=int)
    args = ap.parse_args()
    na, nb = (2000, 20000) if args.quick else (20000, 200000)
    na, nb = args.na or na, args.nb or nb
    if args.worker:
        return worker(args.worker, na, nb)
    for setup in args.setups.split(","):
        compare_setup(setup, args, na, nb)
    if not args.no_store:
        compare_store(args.quick)


if __name__ == "__main__":
    main()
