"""A topic or subscription group made or deleted on a group's master is on every follower
once the operator has the answer, not a slaveSyncInterval later: a failover right after
the change keeps it (real 3-broker DLedger group whose copy loop is too slow to do it)."""
import asyncio
import os
import signal

from ledgermq import Message, Producer
from ledgermq.client.admin import Admin
from ledgermq.broker.name_server_link import HANDED_BY_MASTER
from ledgermq.localcluster.cluster import down, status
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from ..wait import until, wait_until
from .test_transactions_failover import group_up, master

TOPIC = "MadeBeforeFailover"


async def _master_is(admin: Admin, addr: str) -> bool:
    return (await admin.master_addrs()).get("broker-a") == addr


def test_a_topic_made_just_before_a_failover_keeps_its_queues(tmp_path):
    d = tmp_path / "dledger"
    ns = group_up("dledger", d, {"slaveSyncInterval": "600000"})["namesrv"]
    try:
        old = wait_until(lambda: master(d), "a master")

        async def make_and_look():
            async with Admin(ns) as a:
                await a.update_topic(TOPIC, cluster="DefaultCluster", read_queues=6,
                                     write_queues=6, attributes="+message.type=FIFO")
                await a.update_sub_group({"groupName": "stopped", "consumeEnable": False},
                                         cluster="DefaultCluster")
                addrs = (await a.cluster_list())["brokerAddrTable"]["broker-a"]["brokerAddrs"]
                return {addr: await a.topic_config(addr, TOPIC) for addr in addrs.values()}
        configs = asyncio.run(make_and_look())
        assert len(configs) == 3
        for addr, tc in configs.items():
            assert tc is not None, f"{addr} does not have the topic"
            assert (tc["readQueueNums"], tc["writeQueueNums"]) == (6, 6), addr
            assert tc["attributes"]["message.type"] == "FIFO", addr

        follower = next(p for p in status(d)["processes"]
                        if "replPort" in p and p["name"] != old["name"])
        assert asyncio.run(marked_as_handed(f"127.0.0.1:{follower['port']}")) == \
            ResponseCode.SERVICE_NOT_AVAILABLE  # a client is no master that hands changes

        os.kill(old["pid"], signal.SIGKILL)
        new = wait_until(lambda: master(d, old["name"]), "a new master", timeout=30)

        async def after():
            async with Producer("made-p", ns, send_timeout=10) as p:
                queues = await p.queues(TOPIC)
                for q in queues:
                    await p.send(Message(TOPIC, b"x"), q)
            async with Admin(ns) as a:
                new_addr = f"127.0.0.1:{new['port']}"
                await until(lambda: _master_is(a, new_addr), "the new master routed")
                group = (await a.sub_groups("stopped"))["broker-a"]
                on_new_master = await a.topic_config(new_addr, TOPIC)
                await a.delete_topic(TOPIC)
                follower = f"127.0.0.1:{live_follower['port']}"
                return queues, group, on_new_master, await a.topic_config(follower, TOPIC)
        live_follower = next(p for p in status(d)["processes"] if "replPort" in p
                             and p["alive"] and p["name"] not in (old["name"], new["name"]))
        queues, group, on_new_master, after_delete = asyncio.run(after())
        assert group["stopped"]["consumeEnable"] is False
        assert on_new_master is not None and on_new_master["writeQueueNums"] == 6
        assert on_new_master["attributes"]["message.type"] == "FIFO"
        assert sorted(q.queue_id for q in queues) == list(range(6))
        assert after_delete is None
    finally:
        down(d)


async def marked_as_handed(addr: str) -> int:
    """What a follower answers a client's own group change marked as handed by the
    master: the cluster secret, not the mark, makes a change the master's."""
    client = RemotingClient()
    try:
        r = await client.invoke(addr, RemotingCommand(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ext={HANDED_BY_MASTER: "true"},
            body=b'{"groupName": "forged"}'), 5.0)
        return r.code
    finally:
        await client.close()
