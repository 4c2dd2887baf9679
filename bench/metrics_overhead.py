"""The cost of Prometheus metrics on the single-node pipelined send figure (JSON rows).

    python bench/metrics_overhead.py [--msgs 100000] [--rounds 3]

Fresh `ledgermq dev` brokers, metrics off and on in turns (on: scraped every second, as a
Prometheus would, meanwhile); workload b of single_node_bench (pipelined sends, 1,000 in
flight, 100 B), both with the producer's coalescing and one request per message (where a
per-request cost shows most). Prints each run and the ratio of the medians (target, issue
#19: under 3% slower with metrics on).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.single_node_bench import w_pipelined  # noqa: E402
from tests.dev_process import DevProcess  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(metrics: bool, n: int, coalesce: bool) -> float:
    port = free_port()
    conf = {"mappedFileSizeCommitLog": str(1 << 30)}
    if metrics:
        conf["metricsPort"] = str(port)
    with tempfile.TemporaryDirectory(prefix="ledgermq-bench-") as d:
        dev = DevProcess(Path(d), conf).start()
        stop = threading.Event()

        def scrape():
            while not stop.wait(1.0):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        scraper = threading.Thread(target=scrape, daemon=True)
        if metrics:
            scraper.start()
        try:
            r = asyncio.run(w_pipelined(dev.namesrv, n, "BenchMetrics", coalesce=coalesce))
        finally:
            stop.set()
            dev.stop()
    r.update(bench="metrics_overhead", metrics=metrics)
    print(json.dumps(r), flush=True)
    return r["msgs_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--msgs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for coalesce in (True, False):
        rates = {True: [], False: []}
        for _ in range(a.rounds):
            for metrics in (False, True):
                rates[metrics].append(run(metrics, a.msgs, coalesce))
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(json.dumps({"bench": "metrics_overhead", "workload": "b pipelined sends 100B"
                          + ("" if coalesce else " one request per message"),
                          "median_off": off, "median_on": on,
                          "ratio_on_vs_off": round(on / off, 3),
                          "overhead_pct": round(100 * (1 - on / off), 1)}), flush=True)


if __name__ == "__main__":
    main()
