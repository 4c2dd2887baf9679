"""Name server over real sockets on 127.0.0.1: registration, routes, expiry, bad input."""
import asyncio
import json
import struct

import pytest

from ledgermq.namesrv import NamesrvConfig, NameServer, RouteTable
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from ..wait import until


def register_cmd(name="broker-a", addr="127.0.0.1:10911", bid=0, topics=None, cluster="C"):
    topics = {"TopicA": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}} \
        if topics is None else topics
    body = {"topicConfigSerializeWrapper": {"topicConfigTable": topics,
                                            "dataVersion": {"counter": 1}}}
    return RemotingCommand(RequestCode.REGISTER_BROKER,
                           ext={"brokerName": name, "brokerAddr": addr, "clusterName": cluster,
                                "brokerId": str(bid), "haServerAddr": addr.replace("10911", "10912")},
                           body=json.dumps(body).encode())


async def started():
    ns = NameServer(NamesrvConfig(listenPort=0))
    await ns.start()
    return ns


def test_route_table_expiry_and_slaves():
    rt = RouteTable(expire_after_s=120)
    rt.register(cluster="C", broker_name="b", broker_addr="m:1", broker_id=0,
                ha_server_addr="m:2", topics={"T": {"readQueueNums": 2, "writeQueueNums": 2}},
                data_version={}, now=0)
    out = rt.register(cluster="C", broker_name="b", broker_addr="s:1", broker_id=1,
                      ha_server_addr="", topics={}, data_version={}, now=0)
    assert out == {"masterAddr": "m:1", "haServerAddr": "m:2"}
    assert rt.route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "m:1", "1": "s:1"}
    rt.register(cluster="C", broker_name="b", broker_addr="s:1", broker_id=1,
                ha_server_addr="", topics={}, data_version={}, now=100)
    assert rt.expire(now=150) == ["m:1"]  # the master went quiet
    assert rt.route("T")["brokerDatas"][0]["brokerAddrs"] == {"1": "s:1"}
    assert rt.expire(now=300) == ["s:1"]
    assert rt.route("T") is None and rt.cluster_info()["clusterAddrTable"] == {}


def test_register_route_and_cluster_info_over_sockets():
    async def main():
        ns = await started()
        client = RemotingClient()
        try:
            r = await client.invoke(ns.address, register_cmd())
            assert r.code == ResponseCode.SUCCESS
            r = await client.invoke(ns.address, RemotingCommand(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": "TopicA"}))
            route = json.loads(r.body)
            assert route["queueDatas"][0]["writeQueueNums"] == 4
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
            r = await client.invoke(ns.address, RemotingCommand(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": "Nope"}))
            assert r.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in r.remark
            r = await client.invoke(ns.address, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert json.loads(r.body)["clusterAddrTable"] == {"C": ["broker-a"]}
            r = await client.invoke(ns.address, RemotingCommand(
                RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            assert json.loads(r.body)["topicList"] == ["TopicA"]
            r = await client.invoke(ns.address, RemotingCommand(9999))
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            r = await client.invoke(ns.address, RemotingCommand(
                RequestCode.GET_ROUTEINFO_BY_TOPIC))  # no topic field
            assert r.code == ResponseCode.SYSTEM_ERROR and "topic" in r.remark
            # a broker whose connection closes is removed from the routes at once
            await client.close()
            await until(lambda: ns.routes.topics() == [], "the routes emptied", 1.0)
        finally:
            await client.close()
            await ns.stop()
    asyncio.run(main())


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 2**31 - 1) + b"\0" * 64,  # a 2 GB length
    struct.pack(">ii", 12, 8) + b"not json",
    struct.pack(">ii", 100, 4) + b"{}",  # truncated: promises more than it sends
    b"\xff" * 64,
])
def test_garbage_closes_only_that_connection(garbage):
    async def main():
        ns = await started()
        try:
            host, port = ns.address.split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(garbage)
            await writer.drain()
            try:
                data = await asyncio.wait_for(reader.read(), 1.0)
            except asyncio.TimeoutError:
                data = None  # truncated frame: the server waits for the rest; fine
            writer.close()
            assert data in (b"", None)
            client = RemotingClient()
            r = await client.invoke(ns.address, register_cmd())
            assert r.code == ResponseCode.SUCCESS  # the next good client is served
            await client.close()
        finally:
            await ns.stop()
    asyncio.run(main())


def test_a_client_asks_the_next_name_server_when_one_does_not_know_the_topic():
    """Name servers are peers that learn routes from the brokers' registrations: one just
    restarted knows nothing yet. A client given 'a;b' whose first choice answers "no such
    topic" asks the other before believing it, and a dead one is skipped."""
    from ledgermq.client.instance import ClientInstance

    async def go():
        fresh, knowing = await started(), await started()
        client = RemotingClient()
        try:
            r = await client.invoke(knowing.address, register_cmd(), 3.0)
            assert r.code == ResponseCode.SUCCESS
            c = ClientInstance(f"127.0.0.1:1;{fresh.address};{knowing.address}")
            route = await c.fetch_route("TopicA")
            assert route is not None and route.broker_datas[0]["brokerName"] == "broker-a"
            assert await c.fetch_route("NoSuchTopic") is None  # every one says so
            await c.close()
        finally:
            await client.close()
            await fresh.stop()
            await knowing.stop()
    asyncio.run(go())


def test_a_deposed_master_waking_up_cannot_take_the_route_back():
    """Issue #28: a master paused past its controller's timeout wakes, still thinking it
    leads epoch 3, and registers as master. That replaced the real master (epoch 4) in the
    route; as it then re-registered as a slave (unregister first), the group's topics left
    the route: readers saw nothing of the group until the real master's next registration,
    30 s later. As RocketMQ's, a registration for an id held by another live address with
    a newer stateVersion (the master epoch) is ignored."""
    rt = RouteTable(expire_after_s=120)
    topics = {"T": {"readQueueNums": 4, "writeQueueNums": 4}}

    def reg(addr, bid, epoch, now):
        return rt.register(cluster="C", broker_name="a", broker_addr=addr, broker_id=bid,
                           ha_server_addr=addr + "0", topics=topics if bid == 0 else {},
                           data_version={"stateVersion": epoch, "counter": 1}, now=now)
    reg("n0:1", 0, 3, 0)
    reg("n1:1", 2, 3, 0)
    reg("n1:1", 0, 4, 10)  # n1 is the new master in epoch 4
    reg("n0:1", 0, 3, 11)  # n0 wakes up, deposed but not yet told
    assert rt.route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "n1:1"}
    rt.unregister("n0:1")  # n0 learned it follows epoch 4: the old route goes ...
    out = reg("n0:1", 1, 4, 12)  # ... the new one comes
    assert out["masterAddr"] == "n1:1"
    route = rt.route("T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "n1:1", "1": "n0:1"}
    assert [q["brokerName"] for q in route["queueDatas"]] == ["a"]
    # the same address registering again is always taken (a restart starts at 0 again)
    reg("n1:1", 0, 0, 13)
    assert rt.route("T")["brokerDatas"][0]["brokerAddrs"]["0"] == "n1:1"
    # a holder that is gone (unregistered) leaves the id to anyone
    rt.unregister("n1:1")
    reg("n0:1", 0, 5, 14)
    assert rt.route("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "n0:1"}
