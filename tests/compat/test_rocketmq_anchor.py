"""The anchor of #29, smoke-tested: Apache RocketMQ's own name server and broker (from
Maven Central, bench/rocketmq_anchor.py) start here, and RocketMQ's official benchmark
Producer (its Java client, one message a request) sends 100 messages to RocketMQ and 100
to `ledgermq dev`; ledgermq's client then reads all 100 back from each side. Skips, saying
why, only where Java or Maven is missing."""
import asyncio

import pytest

from bench.rocketmq_anchor import SingleBroker, benchmark_producer, missing_tools
from ledgermq import PullConsumer, PullStatus

from ..dev_process import DevProcess

pytestmark = pytest.mark.skipif(missing_tools() is not None,
                                reason=f"the RocketMQ anchor needs Java and Maven: "
                                       f"{missing_tools()}")


async def bodies(namesrv: str, topic: str) -> list[bytes]:
    async with PullConsumer("anchor-reader", namesrv) as c:
        out = []
        for q in await c.fetch_queues(topic):
            offset = 0
            while True:
                r = await c.pull(q, offset, 64)
                if r.status is not PullStatus.FOUND:
                    break
                out += [m.body for m in r.messages]
                offset = r.next_begin_offset
        return out


def test_the_official_benchmark_producer_sends_to_rocketmq_and_to_ledgermq(tmp_path):
    ours = DevProcess(tmp_path / "ledgermq").start()
    try:
        with SingleBroker(tmp_path / "rocketmq") as theirs:
            for namesrv in (theirs.namesrv, ours.namesrv):
                rows = benchmark_producer(namesrv, topic="AnchorSmoke", threads=2,
                                          quantity=100, seconds=120)
                # (a run shorter than a report interval prints no row)
                assert not any(r["send_failed"] or r["response_failed"] for r in rows), \
                    (namesrv, rows)
                got = asyncio.run(bodies(namesrv, "AnchorSmoke"))
                assert len(got) == 100 and {len(b) for b in got} == {100}, (namesrv, len(got))
    finally:
        ours.stop()
