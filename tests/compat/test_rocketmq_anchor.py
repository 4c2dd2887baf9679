"""The anchor of #29, smoke-tested: Apache RocketMQ's own name server and broker (from
Maven Central, bench/rocketmq_anchor.py) start here, and RocketMQ's official benchmark
Producer (its Java client, one message a request) sends 100 messages to RocketMQ and 100
to `ledgermq dev`; ledgermq's client then reads all 100 back from each side, and the
benchmark's own driver (BenchDriver.java) times sync sends on both. Skips, saying
why, only where Java or Maven is missing."""
import asyncio

import pytest

from bench.rocketmq_anchor import (RocketMQ, bench_driver, benchmark_producer, missing_tools,
                                   producer_rows)
from ..dev_process import DevProcess
from ..integration.load import read_all

pytestmark = pytest.mark.skipif(missing_tools() is not None,
                                reason=f"the RocketMQ anchor needs Java and Maven: "
                                       f"{missing_tools()}")


@pytest.mark.compat  # (46 s: in make compat, beside the other long client runs)
def test_the_official_benchmark_producer_sends_to_rocketmq_and_to_ledgermq(tmp_path):
    ours = DevProcess(tmp_path / "ledgermq").start()
    try:
        with RocketMQ(tmp_path / "rocketmq", "single") as theirs:
            for namesrv in (theirs.namesrv, ours.namesrv):
                rows = benchmark_producer(namesrv, topic="AnchorSmoke", threads=2,
                                          quantity=100, seconds=120)
                # its one row at the end: all sent, none failed
                assert [(r.get("total"), r["send_failed"], r["response_failed"])
                        for r in rows] == [(100, 0, 0)], (namesrv, rows)
                # (RocketMQ registers an auto-created topic with its name server a little later)
                queues = asyncio.run(read_all(namesrv, 30.0, topic="AnchorSmoke"))
                got = [b for q in queues.values() for b in q]
                assert len(got) == 100 and {len(b) for b in got} == {100}, (namesrv, len(got))
                # the bench's own driver (RocketMQ's Java client) times sync sends on both
                (row,) = [r for r in bench_driver("sync", namesrv, "AnchorSync", 50, 100)
                          if "workload" in r]
                assert row["msgs"] == 50 and 0 < row["p50_ms"] <= row["p99_ms"], row
    finally:
        ours.stop()


def test_every_form_of_the_producers_last_line_is_read():
    """The benchmark Producer's three report lines (the full one, one whose snapshots saw
    no send complete, a run shorter than one report); a full run once printed the second
    and the smoke test above found no report."""

    lines = ["[Complete] Send Total: 100 | Send TPS: 52 | Max RT(ms): 9 | Average RT(ms):   1.250 "
             "| Send Failed: 0 | Response Failed: 1",
             "[Complete] Send Total: 100 | Send TPS: 0 | Max RT(ms): 1078 | Average RT(ms):     NaN "
             "| Send Failed: 0 | Response Failed: 0",
             "[Complete] Send Total: 100 Send Failed: 2 Response Failed: 0"]
    assert [[(r["total"], r["send_failed"], r["response_failed"]) for r in producer_rows(line)]
            for line in lines] == [[(100, 0, 1)], [(100, 0, 0)], [(100, 2, 0)]]
