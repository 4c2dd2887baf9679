"""A subscription group's config and an offset reset made on the old master hold on the new
one (real 3-broker groups, DLedger and controller mode): followers copy them from the
master, so the operator's change survives the master's death."""
import asyncio
import json
import os
import signal

import pytest

from ledgermq import Message, MQClientError, Producer, PullConsumer
from ledgermq.client.admin import Admin
from ledgermq.localcluster.cluster import down
from ledgermq.remoting import ResponseCode

from ..wait import until, wait_until
from .test_transactions_failover import group_up, master

TOPIC = "GroupsFailover"


@pytest.mark.parametrize("mode", ["dledger", "controller"])
def test_group_config_and_a_reset_survive_a_failover(tmp_path, mode):
    d = tmp_path / mode
    ns = group_up(mode, d, {"slaveSyncInterval": "300",
                            "flushConsumerOffsetInterval": "300"})["namesrv"]
    try:
        old = wait_until(lambda: master(d), "a master")

        async def before():
            async with Producer("gf-p", ns, send_timeout=10) as p:
                q = (await p.queues(TOPIC))[0]
                for i in range(10):
                    await p.send(Message(TOPIC, b"m%d" % i), q)
            async with PullConsumer("rewound", ns) as c:
                await c.commit(q, 10)  # read everything
            return q
        q = asyncio.run(before())
        wait_until(lambda: followers_have(d, old, 10), "the followers copied offset 10")

        async def reset():
            async with Admin(ns) as a:
                await a.reset_offset("rewound", TOPIC, 0)  # ... then back to the start
                await a.update_sub_group({"groupName": "stopped", "consumeEnable": False},
                                         cluster="DefaultCluster")
        asyncio.run(reset())
        wait_until(lambda: followers_have(d, old, 0), "the followers copied the reset and "
                   "the group", timeout=20)
        os.kill(old["pid"], signal.SIGKILL)
        wait_until(lambda: master(d, old["name"]), "a new master", timeout=30)

        async def after():
            async with PullConsumer("rewound", ns) as c:
                await until(lambda: _offset(c, q), "the reset offset on the new master",
                            timeout=20, interval=0.3)
            async with PullConsumer("stopped", ns) as c:
                async def refused():
                    try:
                        await c.pull(q, 0, 1)
                    except MQClientError as e:
                        return e.code == ResponseCode.NO_PERMISSION
                    return False
                await until(refused, "the disabled group refused by the new master",
                            timeout=20, interval=0.3)
        asyncio.run(after())
    finally:
        down(d)


def followers_have(d, old, offset: int) -> bool:
    """Every follower's saved files hold the group's queue 0 at `offset` (and, once reset,
    the disabled group)."""
    for n in ("n0", "n1", "n2"):
        if n == old["name"]:
            continue
        cfg = d / n / "store" / "config"
        table = json.loads((cfg / "consumerOffset.json").read_text())["offsetTable"]
        if table.get(f"{TOPIC}@rewound", {}).get("0") != offset:
            return False
        if offset == 0 and '"stopped"' not in (cfg / "subscriptionGroup.json").read_text():
            return False
    return True


async def _offset(c: PullConsumer, q) -> bool:
    try:
        return await c.query_offset(q) == 0
    except Exception:  # noqa: BLE001 - the route may still name the dead master
        return False
