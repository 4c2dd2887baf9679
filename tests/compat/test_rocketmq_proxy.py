"""Apache RocketMQ's own gRPC proxy (5.5.0 from Maven Central, cluster mode) in front of
`ledgermq dev`: RocketMQ 5's official Java client reaches ledgermq through it, the proxy
speaking remoting to ledgermq's name server and broker (routes, sends, POP, acks, invisible
time). The same client runs as in test_java_grpc_client.py, against the proxy's endpoint.
Skips, saying why, only where Java or Maven is missing."""
import pytest

from bench.rocketmq_anchor import FrontProxy, missing_tools

from ..dev_process import DevProcess
from .drivers import create_topic
from .test_java_grpc_client import java

pytestmark = [pytest.mark.skipif(missing_tools() is not None,
                                 reason=f"RocketMQ's proxy needs Java and Maven: "
                                        f"{missing_tools()}"),
              pytest.mark.compat]  # (make compat: a proxy JVM and a client JVM per command)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """(ledgermq dev, RocketMQ's proxy in front of it)"""
    d = DevProcess(tmp_path_factory.mktemp("proxied") / "ledgermq", {
        "transactionTimeOut": "400", "transactionCheckInterval": "200"}).start()
    try:
        with FrontProxy(tmp_path_factory.mktemp("proxy"), front_of=d.namesrv) as p:
            yield d, p
    finally:
        d.stop()


def test_send_receive_ack_through_rocketmqs_proxy(proxied):
    d, p = proxied
    create_topic(d.namesrv, "ViaProxy", 2)
    sent = java("produce", p.grpc, "ViaProxy", 6, "normal")
    got = java("receive", p.grpc, "via-proxy", "ViaProxy", 6, 30)["messages"]
    assert sorted(m["body"] for m in got) == [f"normal-{i}" for i in range(6)]
    assert {m["id"] for m in got} == set(sent["ids"])
    one = next(m for m in got if m["body"] == "normal-2")
    assert (one["tag"], one["keys"], one["attempt"]) == ("TagJava", ["key-2"], 1)
    # every ack reached ledgermq: nothing is left for the group
    assert java("receive", p.grpc, "via-proxy", "ViaProxy", 1, 3)["messages"] == []


def test_invisible_time_and_push_consumer_through_rocketmqs_proxy(proxied):
    d, p = proxied
    create_topic(d.namesrv, "ViaProxyAgain", 1)
    java("produce", p.grpc, "ViaProxyAgain", 1, "normal")
    out = java("redeliver", p.grpc, "via-proxy-again", "ViaProxyAgain")
    # the proxy changed the invisible time on ledgermq; the message came back, a second
    # delivery (through the group's retry topic), and its ack under the retry topic held
    assert (out["first"]["id"], out["first"]["attempt"], out["again"]["attempt"]) == (
        out["again"]["id"], 1, 2)
    create_topic(d.namesrv, "ViaProxyPush", 2)
    java("produce", p.grpc, "ViaProxyPush", 6, "normal")
    got = java("push", p.grpc, "via-proxy-push", "ViaProxyPush", 6, 40)["messages"]
    assert sorted(m["body"] for m in got) == [f"normal-{i}" for i in range(6)]


def test_fifo_delay_and_transactions_through_rocketmqs_proxy(proxied):
    """A topic whose type no one declared takes every kind (ledgermq answers MIXED); one
    declared NORMAL (RocketMQ's `updateTopic -a +message.type=NORMAL`) is held to it by
    the proxy."""
    d, p = proxied
    create_topic(d.namesrv, "ViaProxyNormal", 1, attributes="+message.type=NORMAL")
    with pytest.raises(AssertionError, match="message type not match"):
        java("produce", p.grpc, "ViaProxyNormal", 1, "fifo")
    create_topic(d.namesrv, "ViaProxyKinds", 2)
    java("produce", p.grpc, "ViaProxyKinds", 4, "fifo")
    java("produce", p.grpc, "ViaProxyKinds", 1, "delay")
    java("produce", p.grpc, "ViaProxyKinds", 1, "tx-commit")
    java("produce", p.grpc, "ViaProxyKinds", 1, "tx-rollback")
    got = java("receive", p.grpc, "via-proxy-kinds", "ViaProxyKinds", 6, 40)["messages"]
    assert sorted(m["body"] for m in got) == sorted(
        [f"fifo-{i}" for i in range(4)] + ["delay-0", "tx-commit-0"])
    for group in ("group-0", "group-1"):  # each message group in the order it was sent
        mine = [m["body"] for m in got if m["group"] == group]
        assert mine == sorted(mine, key=lambda b: int(b.split("-")[1]))


def test_rocketmqs_python_client_through_rocketmqs_proxy(proxied, v5):
    """RocketMQ 5's Python client (rocketmq-python-client 5.1.2) through the same proxy:
    a producer and a SimpleConsumer that acks what it received."""
    d, p = proxied
    create_topic(d.namesrv, "ViaProxyPython", 2)
    sent = v5(p.grpc, "produce", "ViaProxyPython", 10, "normal")["receipts"]
    got = v5(p.grpc, "consume", "via-proxy-python", "ViaProxyPython", 10, 30)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"normal-{i}" for i in range(10))
    assert {m["id"] for m in got} == {r["id"] for r in sent}
    assert next(m for m in got if m["body"] == "normal-4")["properties"] == {"color": "red"}


def test_a_dledger_failover_behind_rocketmqs_proxy(tmp_path):
    """A DLedger group of three behind RocketMQ's proxy: the leader killed, the proxy sends
    to the new one once it refreshes the route from ledgermq's name server (every 2 s
    here; RocketMQ's default topicRouteServiceCacheRefreshSeconds is 20), and nothing
    acknowledged before or after is lost."""
    import os
    import signal
    import time

    from ledgermq.localcluster.cluster import MASTER_ROLES, down, health, status, up

    from ..wait import wait_until

    d = tmp_path / "cluster"
    ns = up("dledger", 3, d, {"mappedFileSizeCommitLog": str(8 << 20)})["namesrv"]
    try:
        wait_until(lambda: health(status(d))[0], "the group whole", timeout=60)
        create_topic(ns, "ViaProxyFailover", 2)
        with FrontProxy(tmp_path / "proxy", front_of=ns,
                        settings={"topicRouteServiceCacheRefreshSeconds": 2}) as p:
            before = java("produce", p.grpc, "ViaProxyFailover", 3, "normal")["ids"]
            leader = next(x for x in status(d)["processes"]
                          if x["alive"] and x.get("role") in MASTER_ROLES)
            os.kill(leader["pid"], signal.SIGKILL)
            killed, after = time.monotonic(), None
            while after is None and time.monotonic() - killed < 30:
                try:  # (each attempt is a client JVM: its start takes about two seconds)
                    after = java("produce", p.grpc, "ViaProxyFailover", 1, "normal")["ids"]
                except AssertionError:
                    pass
            assert after is not None, "no send got through the proxy within 30 s"
            got = java("receive", p.grpc, "via-proxy-failover", "ViaProxyFailover", 4,
                       30)["messages"]
            assert {m["id"] for m in got} == set(before + after)
    finally:
        down(d)


def test_a_fifo_group_through_rocketmqs_proxy(proxied):
    """A group configured FIFO (consumeMessageOrderly, which the proxy reads from
    ledgermq): the proxy pops in order, and each message group arrives in the order sent."""
    import asyncio

    from ledgermq.client.admin import Admin

    d, p = proxied
    create_topic(d.namesrv, "ViaProxyFifo", 2)

    async def fifo_group():
        async with Admin(d.namesrv) as a:
            await a.update_sub_group({"groupName": "via-proxy-fifo",
                                      "consumeMessageOrderly": True})
    asyncio.run(fifo_group())
    java("produce", p.grpc, "ViaProxyFifo", 8, "fifo")
    got = java("receive", p.grpc, "via-proxy-fifo", "ViaProxyFifo", 8, 40)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"fifo-{i}" for i in range(8))
    for group in ("group-0", "group-1"):
        mine = [int(m["body"].split("-")[1]) for m in got if m["group"] == group]
        assert mine == sorted(mine), (group, mine)
    assert {m["attempt"] for m in got} == {1}
