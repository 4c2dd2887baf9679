"""The cost of TLS on a single node: plaintext and TLS brokers in turns, in the same run
(JSON rows).

    python bench/tls_bench.py [--sync 5000] [--msgs 100000] [--rounds 3]

Fresh `ledgermq dev` brokers, tls.server.mode disabled and enforcing in turns (the
client trusts a CA this run makes; LEDGERMQ_TLS switches ledgermq's client). Workloads of
single_node_bench, 100 B: a (sync sends one at a time: p50/p99) and b (pipelined sends,
1,000 in flight, with the producer's coalescing and one request per message); and what a
new connection costs (connect, handshake and one request, p50). Prints each run, then
the medians and the ratio TLS / plaintext per figure.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.single_node_bench import arun, pct, w_pipelined, w_sync  # noqa: E402
from ledgermq.localcluster.certs import CertAuthority
from ledgermq.client.instance import tls_context  # noqa: E402
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode  # noqa: E402
from tests.dev_process import DevProcess  # noqa: E402


async def w_connect(broker: str, n: int) -> dict:
    """A new connection and its first request (the handshake's cost under TLS), n times."""
    lats = []
    for _ in range(n):
        client = RemotingClient(ssl_context=tls_context(None))
        t0 = time.perf_counter()
        await client.invoke(broker, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO))
        lats.append(time.perf_counter() - t0)
        await client.close()
    return {"bench": "tls", "workload": "new connection + first request", "msgs": n,
            "p50_ms": pct(lats, 50), "p99_ms": pct(lats, 99)}


def one_run(tls: bool, pki: dict, a) -> list[dict]:
    conf = {"mappedFileSizeCommitLog": str(1 << 30)}
    if tls:
        conf.update({"tls.server.mode": "enforcing", "tls.server.certPath": pki["cert"],
                     "tls.server.keyPath": pki["key"], "tls.enable": "true",
                     "tls.client.trustCertPath": pki["ca"]})
        os.environ.update(LEDGERMQ_TLS="true", LEDGERMQ_TLS_CA=pki["ca"])
    else:
        os.environ["LEDGERMQ_TLS"] = "false"
    rows = []
    with tempfile.TemporaryDirectory(prefix="ledgermq-bench-") as d:
        dev = DevProcess(Path(d), conf).start()
        try:
            rows.append(arun(w_sync(dev.namesrv, a.sync)))
            rows.append(arun(w_pipelined(dev.namesrv, a.msgs, "BenchTls")))
            rows.append(arun(w_pipelined(dev.namesrv, a.msgs // 2, "BenchTls1",
                                         coalesce=False)))
            rows.append(arun(w_connect(dev.broker, a.connects)))
        finally:
            dev.stop()
    for r in rows:
        r.update(bench="tls", tls=tls)
        print(json.dumps(r), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sync", type=int, default=5000, help="sync sends per run (a)")
    ap.add_argument("--msgs", type=int, default=100_000, help="pipelined sends per run (b)")
    ap.add_argument("--connects", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ledgermq-bench-pki-") as d:
        ca = CertAuthority.create(Path(d))
        cert, key = ca.issue(Path(d), "broker")
        pki = {"ca": str(ca.cert_path), "cert": str(cert), "key": str(key)}
        runs: dict[bool, list[list[dict]]] = {False: [], True: []}
        for _ in range(a.rounds):
            for tls in (False, True):
                runs[tls].append(one_run(tls, pki, a))
    for i, first in enumerate(runs[False][0]):
        key = "p50_ms" if "msgs_per_s" not in first or "sync" in first["workload"] \
            or "connection" in first["workload"] else "msgs_per_s"
        plain = statistics.median(r[i][key] for r in runs[False])
        tls = statistics.median(r[i][key] for r in runs[True])
        print(json.dumps({"bench": "tls", "workload": first["workload"], "figure": key,
                          "median_plaintext": plain, "median_tls": tls,
                          "ratio_tls_vs_plaintext": round(tls / plain, 3)}), flush=True)


if __name__ == "__main__":
    main()
