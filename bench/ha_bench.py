"""The replication designs side by side, against NATS JetStream replicas=3, in one run
(JSON rows):

    python bench/ha_bench.py [--quick] [--no-anchor] [--trials 10] [--modes sync,async,...]

For each group (SYNC_MASTER + 1 slave, ASYNC_MASTER + 1 slave, checkpoint mode: master +
2 slaves + control node, DLedger x3, controller mode: 3 brokers + 3 controllers), the
single-node workloads (sync p50/p99, pipelined, batch of 100, consume) from the Python
client, everything on the same 2 cores. In checkpoint mode, which flushes whatever
flushDiskType says (the master before it sends, each slave before it reports), also how
many messages each broker's fsyncs covered (group commit). Then, in checkpoint and
controller mode, failover:
kill -9 of the master to the first SEND_OK from the new one, `--trials` times (the old
master is restarted and catches up as a slave in between).
Targets: SYNC_MASTER batch >= 1.5x DLedger mode's; failover p50 <= 2 s.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.anchor import anchor_phases  # noqa: E402
from bench.dledger_bench import first_ok_after_kill, leader  # noqa: E402
from bench.single_node_bench import arun, workloads  # noqa: E402
from ledgermq.client.admin import Admin  # noqa: E402
from ledgermq.localcluster.cluster import down, restart, status, up

GROUPS = {"sync": ("sync", 2), "async": ("async", 2), "checkpoint": ("checkpoint", 3),
          "dledger": ("dledger", 3), "controller": ("controller", 3)}
FAILOVER = ("checkpoint", "controller")  # modes whose master is replaced automatically


def master(d: Path, timeout: float = 20.0, not_name: str | None = None) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ms = [p for p in status(d)["processes"] if p.get("role") in ("MASTER", "SYNC_MASTER",
                                                                      "ASYNC_MASTER")
              and p["alive"] and p["name"] != not_name]
        if len(ms) == 1:
            return ms[0]
        time.sleep(0.1)
    raise RuntimeError(f"no master in {d}")


def slaves_caught_up(d: Path, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ps = {p["name"]: p for p in status(d)["processes"]}
        m = next((p for p in ps.values() if p.get("role") == "MASTER"), None)
        slaves = [p for p in ps.values() if p.get("role") == "SLAVE"]
        if m and len(slaves) == 2 and all(
                s["ha"].get("maxOffset") == m["ha"]["logEnd"] for s in slaves):
            return
        time.sleep(0.2)
    raise RuntimeError("slaves did not catch up")


def flushes(d: Path) -> dict[str, int]:
    """Each live broker's commit-log fsyncs so far (those that made more of it durable)."""
    st = status(d)

    async def ask() -> dict[str, int]:
        out = {}
        async with Admin(st["namesrv"]) as a:
            for p in st["processes"]:
                if p.get("role") in ("MASTER", "SLAVE") and p["alive"]:
                    info = await a.broker_status(f"127.0.0.1:{p['port']}")
                    out[f"{p['role'].lower()} {p['name']}"] = int(info["commitLogFlushes"])
        return out
    return arun(ask())


def failover_trials(d: Path, ns: str, trials: int, name: str) -> dict:
    times = []
    for _ in range(trials):
        victim = master(d)
        times.append(arun(first_ok_after_kill(ns, victim["pid"])))
        restart(d, victim["name"])
        slaves_caught_up(d)
    return {"bench": f"{name} master+2 slaves", "workload": "failover: kill -9 master -> "
            "first SEND_OK", "trials": len(times),
            "p50_s": round(sorted(times)[len(times) // 2], 3), "max_s": round(max(times), 3),
            "all_s": [round(t, 3) for t in times], "target": "p50 <= 2 s"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--modes", default="sync,async,checkpoint,dledger,controller")
    args = ap.parse_args()
    na, nb = (1000, 20000) if args.quick else (10000, 100000)
    anchor = anchor_phases(3, na, nb, skip=args.no_anchor)
    batch = {}
    for name in args.modes.split(","):
        mode, n = GROUPS[name]
        with tempfile.TemporaryDirectory(prefix=f"ledgermq-{name}-") as tmp:
            d = Path(tmp) / "group"
            state = up(mode, n, d, controllers=3)
            try:
                leader(d) if mode == "dledger" else master(d)
                if mode in FAILOVER:
                    slaves_caught_up(d)
                before = flushes(d) if mode == "checkpoint" else {}
                sent = 0
                for r in workloads(state["namesrv"], na, nb, anchor):
                    r["bench"] = f"{name} replicas={n}"
                    if r["workload"].startswith("c "):
                        batch[name] = r["msgs_per_s"]
                    if not r["workload"].startswith("d "):
                        sent += r["msgs"]
                    print(json.dumps(r), flush=True)
                if before:
                    slaves_caught_up(d)
                    after = flushes(d)
                    print(json.dumps({
                        "bench": f"{name} replicas={n}", "workload": "group commit: "
                        "messages per fsync over the send workloads", "msgs": sent,
                        "fsyncs": {k: after[k] - before.get(k, 0) for k in after},
                        "msgs_per_fsync": {k: round(sent / max(1, after[k] - before.get(k, 0)),
                                                    1) for k in after}}), flush=True)
                if mode in FAILOVER and args.trials:
                    print(json.dumps(failover_trials(d, state["namesrv"], args.trials, name)),
                          flush=True)
            finally:
                down(d)
    if "sync" in batch and "dledger" in batch:
        print(json.dumps({"bench": "sync vs dledger", "workload": "c batch of 100",
                          "sync_msgs_per_s": batch["sync"],
                          "dledger_msgs_per_s": batch["dledger"],
                          "ratio": round(batch["sync"] / batch["dledger"], 2),
                          "target": ">= 1.5x"}), flush=True)


if __name__ == "__main__":
    main()
