"""Timer messages pending when the master dies (real 3-broker groups, DLedger and controller
mode): the new master rebuilds them from the replicated timer topic and delivers every one
exactly once, none before its time."""
import asyncio
import os
import signal
import time

import pytest

from ledgermq import Message, Producer, PullConsumer, PullStatus
from ledgermq.localcluster.cluster import down

from ..wait import until, wait_until
from .test_transactions_failover import group_up, master

TOPIC = "FailoverTimers"
N = 20


async def delivered(ns: str) -> list:
    """(body, TIMER_OUT_MS, store timestamp) of every message in the topic."""
    async with PullConsumer("timer-reader", ns) as c:
        out = []
        for q in await c.fetch_queues(TOPIC):
            offset = 0
            while True:
                r = await c.pull(q, offset, 100)
                if r.status is not PullStatus.FOUND:
                    break
                out += [(m.body, int(m.properties["TIMER_OUT_MS"]), m.store_timestamp)
                        for m in r.messages]
                offset = r.next_begin_offset
        return out


# controller mode in the slow run (make test-slow): the same path, a second election protocol
@pytest.mark.parametrize("mode", ["dledger", pytest.param("controller", marks=pytest.mark.slow)])
def test_pending_timers_are_delivered_once_by_the_new_master(tmp_path, mode):
    d = tmp_path / mode
    ns = group_up(mode, d)["namesrv"]
    try:
        old = wait_until(lambda: master(d), "a master")

        async def send(ns):
            async with Producer("timer-fo", ns, send_timeout=10) as p:
                now = int(time.time() * 1000)
                for i in range(N):  # due from 1 s to ~8 s from now
                    r = await p.send(Message(TOPIC, b"t%d" % i,
                                             deliver_time_ms=now + 1000 + 350 * i))
                    assert r.status.value == "SEND_OK"
        asyncio.run(send(ns))
        os.kill(old["pid"], signal.SIGKILL)
        wait_until(lambda: master(d, old["name"]), "a new master", timeout=30)

        async def check():
            async def all_in():
                return len(await delivered(ns)) >= N
            await until(all_in, f"{N} timers delivered", timeout=40, interval=0.2)
            await asyncio.sleep(1.0)  # more ticks: none delivered twice
            got = await delivered(ns)
            assert sorted(b for b, _, _ in got) == sorted(b"t%d" % i for i in range(N))
            early = [(b, due, stored) for b, due, stored in got if stored < due]
            assert not early, early
        asyncio.run(check())
    finally:
        down(d)
