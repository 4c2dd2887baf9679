"""RocketMQ's own C++ client (rocketmq==0.4.4) against `ledgermq dev`."""
import asyncio
import os
import signal
from collections import defaultdict

import pytest

from ledgermq import Message, Producer, PullConsumer, PullStatus
from ledgermq.client.admin import Admin

from ..integration.load import read_all
from ..wait import wait_until


def route_master(namesrv, topic):
    """The master address the name server gives for `topic` (one broker group)."""
    async def go():
        async with Admin(namesrv) as a:
            route = await a.topic_route(topic)
        return next(bd["brokerAddrs"].get("0") for bd in route["brokerDatas"])
    return asyncio.run(go())


def by_queue(messages):
    out = defaultdict(list)
    for m in messages:
        out[m["queue_id"]].append(m)
    return out


def test_cpp_producer_and_consumers(dev, cpp):
    d = dev()
    n = 1000
    sent = cpp(d.namesrv, "produce", "CppTopic", n)["results"]
    assert len(sent) == n and all(status == 0 for status, _, _ in sent)  # SEND_OK
    assert len({msg_id for _, msg_id, _ in sent}) == n

    orderly = cpp(d.namesrv, "orderly", "CppOrderly", 50)["results"]
    assert [offset for _, _, offset in orderly] == list(range(50))  # one queue, in order

    batch = cpp(d.namesrv, "batch", "CppBatch", 100)["results"]
    assert len(batch) == 10 and all(status == 0 for status, _, _ in batch)

    pushed = cpp(d.namesrv, "push", "CppTopic", "CppGroup", n, 60)["messages"]
    assert sorted(m["body"] for m in pushed) == sorted(f"body-{i}" for i in range(n))
    assert len(pushed) == n  # nothing twice
    for m in pushed:
        i = int(m["body"].split("-")[1])
        assert m["keys"] == f"key-{i}" and m["tags"] == f"tag-{i % 3}"
    for qid, ms in by_queue(pushed).items():
        assert sorted(m["queue_offset"] for m in ms) == list(range(len(ms)))

    pulled = cpp(d.namesrv, "pull", "CppBatch", "CppPullGroup")["messages"]
    assert sorted(m["body"] for m in pulled) == sorted(f"body-{i}" for i in range(100))
    for ms in by_queue(pulled).values():
        offsets = [m["queue_offset"] for m in ms]
        assert offsets == sorted(offsets) == list(range(len(ms)))  # per-queue order
        bodies = [int(m["body"].split("-")[1]) for m in ms]
        assert bodies == sorted(bodies)  # batches land whole and in order

    ordered = cpp(d.namesrv, "pull", "CppOrderly", "CppPullGroup2")["messages"]
    assert [m["body"] for m in ordered] == [f"body-{i}" for i in range(50)]


def test_python_and_cpp_clients_interoperate(dev, cpp):
    d = dev()

    async def produce():
        async with Producer("py", d.namesrv) as p:
            for i in range(100):
                await p.send(Message("Mixed", b"py-%d" % i, tags="py", keys=f"pk-{i}"))
    asyncio.run(produce())
    got = cpp(d.namesrv, "push", "Mixed", "MixedGroup", 100, 60)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"py-{i}" for i in range(100))
    assert all(m["tags"] == "py" for m in got)

    cpp(d.namesrv, "produce", "FromCpp", 30)

    async def consume():
        async with PullConsumer("pyc", d.namesrv) as c:
            bodies = []
            for q in await c.fetch_queues("FromCpp"):
                r = await c.pull(q, 0, 100)
                if r.status is PullStatus.FOUND:
                    bodies += [(m.body, m.keys, m.tags) for m in r.messages]
            return bodies
    bodies = asyncio.run(consume())
    assert sorted(bodies) == sorted((b"body-%d" % i, [f"key-{i}"], f"tag-{i % 3}")
                                    for i in range(30))


def test_cpp_oneway_delay_orderly_and_retry(dev, cpp):
    d = dev()
    cpp(d.namesrv, "oneway", "CppOneway", 20)
    got = cpp(d.namesrv, "pull", "CppOneway", "OnewayReader")["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"body-{i}" for i in range(20))

    sent = cpp(d.namesrv, "delay", "CppDelay", 5)["results"]
    assert all(status == 0 for status, *_ in sent)
    wait_until(lambda: sum(map(len, asyncio.run(read_all(d.namesrv, 0, "CppDelay")).values()))
               >= 5, "the delayed messages delivered")
    delayed = cpp(d.namesrv, "pull", "CppDelay", "DelayReader")["messages"]
    # delay level 1 (0.2 s in the test broker): the messages reach the topic only later
    assert sorted(m["body"] for m in delayed) == sorted(f"body-{i}" for i in range(5))

    cpp(d.namesrv, "orderly", "CppOrderly2", 30)
    ordered = cpp(d.namesrv, "pushorderly", "CppOrderly2", "OrderlyGroup", 30, 60)["messages"]
    assert [m["body"] for m in ordered] == [f"body-{i}" for i in range(30)]

    cpp(d.namesrv, "produce", "CppRetry", 10)

    async def retry_topic():  # clients look up routes every 30 s: have it before they start
        async with Admin(d.namesrv) as a:
            await a.update_topic("%RETRY%RetryGroup", cluster="DefaultCluster",
                                 read_queues=1, write_queues=1)
    asyncio.run(retry_topic())
    # (60 s: on a loaded machine the client's 3 s send-back may time out and be retried)
    retried = cpp(d.namesrv, "retry", "CppRetry", "RetryGroup", 10, 60)["messages"]
    assert {m["body"] for m in retried} == {f"body-{i}" for i in range(10)}
    assert all(m["reconsume_times"] == 1 for m in retried), [m["reconsume_times"] for m in retried]

    async def sent_back():  # every failed delivery came back to the broker for retry
        async with PullConsumer("check-retry", d.namesrv) as c:
            out = []
            for q in await c.fetch_queues("%RETRY%RetryGroup"):
                r = await c.pull(q, 0, 100)
                out += [m.body for m in r.messages]
            return out
    assert sorted(asyncio.run(sent_back())) == sorted(b"body-%d" % i for i in range(10))


@pytest.mark.parametrize("mode", ["controller", "dledger", "checkpoint"])
def test_cpp_client_across_a_failover(tmp_path, cpp, mode):
    """RocketMQ's C++ client against a replicated group: every send it had acknowledged is
    read back by it from the new master after the old one is killed (the new master
    serves the topic even if it never copied its config)."""
    from ledgermq.localcluster.cluster import down, status, up

    d = tmp_path / mode
    state = up(mode, 3, d)

    def masters():
        return [p for p in status(d)["processes"]
                if p.get("alive") and p.get("role") in ("MASTER", "LEADER")]
    try:
        old = wait_until(lambda: len(m := masters()) == 1 and m[0], "a single master", 30)
        sent = cpp(state["namesrv"], "produce", "FailTopic", 300)["results"]
        assert len(sent) == 300 and all(code == 0 for code, _, _ in sent)
        os.kill(old["pid"], signal.SIGKILL)
        new = wait_until(lambda: next((p for p in masters() if p["name"] != old["name"]), None),
                         "a new master", 30)
        wait_until(lambda: route_master(state["namesrv"], "FailTopic") ==
                   f"127.0.0.1:{new['port']}", "the name server routes to the new master")
        pulled = cpp(state["namesrv"], "pull", "FailTopic", "FailGroup")["messages"]
        assert sorted(m["body"] for m in pulled) == sorted(f"body-{i}" for i in range(300))
    finally:
        down(d)


def test_cpp_timer_messages_wait_until_due(dev, cpp):
    """RocketMQ 5's TIMER_DELAY_SEC set by the C++ client (a property it passes through):
    a fresh group reads nothing before the 2 s are up (they were delivered at once before
    timers existed), every one after."""
    import time

    d = dev()
    sent = cpp(d.namesrv, "timer", "CppTimer", 5)["results"]
    assert [status for status, *_ in sent] == [0] * 5
    first_sent = min(t for *_, t in sent)

    def stored():
        return sum(len(v) for v in asyncio.run(read_all(d.namesrv, topic="CppTimer")).values())
    if time.time() - first_sent < 1.5:  # still well before the due time: none may be there
        assert stored() == 0
    wait_until(lambda: stored() == 5, "the five timer messages delivered", timeout=15)
    assert time.time() - first_sent >= 2.0


@pytest.mark.compat  # (make compat: a consumer's rebalance and its offset jump, ~18 s)
def test_a_running_cpp_push_consumer_jumps_back_with_reset_offset_by_time(dev, cpp):
    """resetOffsetByTime while RocketMQ's C++ push consumer runs: the broker tells it
    (RESET_CONSUMER_CLIENT_OFFSET, RocketMQ's body for C clients) and it reads again."""
    import threading

    d = dev()

    async def send():
        async with Producer("reset-p", d.namesrv) as p:
            for i in range(5):
                await p.send(Message("CppReset", b"r%d" % i))
    asyncio.run(send())
    out = {}
    worker = threading.Thread(target=lambda: out.update(
        cpp(d.namesrv, "push", "CppReset", "cpp-reset", 10, 40)))
    worker.start()

    async def consumed() -> bool:
        async with Admin(d.namesrv) as a:
            rows = await a.consumer_progress("cpp-reset", "CppReset")
        return sum(max(r["consumerOffset"], 0) for r in rows) == 5

    async def reset():
        async with Admin(d.namesrv) as a:
            await a.reset_offset("cpp-reset", "CppReset", 0)
    wait_until(lambda: asyncio.run(consumed()), "the C++ consumer committed all 5",
               timeout=30)
    asyncio.run(reset())
    worker.join(60)
    bodies = sorted(m["body"] for m in out["messages"])
    assert bodies == sorted([f"r{i}" for i in range(5)] * 2), bodies


ACL = """
accounts:
  - accessKey: admin-key
    secretKey: admin-secret-1
    admin: true
  - accessKey: app-key
    secretKey: app-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - AclTopic=PUB|SUB
      - ReadOnlyTopic=SUB
"""


def test_acl_with_the_cpp_clients_signatures(tmp_path, cpp, monkeypatch):
    """aclEnable: RocketMQ's C++ client signing with the right key sends; a wrong secret,
    no credentials, or a topic the account may only read are refused; an edit of
    plain_acl.yml takes effect without a restart."""
    from ..dev_process import DevProcess
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    d = DevProcess(tmp_path / "dev", {"aclEnable": "true", "aclFile": str(acl)}).start()
    try:
        async def topics():
            async with Admin(d.namesrv) as a:
                for t in ("AclTopic", "ReadOnlyTopic"):
                    await a.update_topic(t, read_queues=1, write_queues=1)
        with pytest.raises(Exception, match="no AccessKey"):
            asyncio.run(topics())  # our own admin client, unsigned
        monkeypatch.setenv("LEDGERMQ_ACCESS_KEY", "admin-key")
        monkeypatch.setenv("LEDGERMQ_SECRET_KEY", "admin-secret-1")
        asyncio.run(topics())

        def trysend(topic, ak=None, sk=None):
            env = {"CPP_ACCESS_KEY": ak, "CPP_SECRET_KEY": sk} if ak else {}
            for k, v in env.items():
                monkeypatch.setenv(k, v)
            try:
                return cpp(d.namesrv, "trysend", topic)
            finally:
                for k in env:
                    monkeypatch.delenv(k)
        def refused_because(*args):
            """The broker's reason, as the client logged it (its exception is generic)."""
            assert not trysend(*args)["ok"]
            newest = max((tmp_path / "home" / "logs" / "rocketmq-cpp").iterdir(),
                         key=lambda p: p.stat().st_mtime)
            return newest.read_text(errors="replace")
        assert trysend("AclTopic", "app-key", "app-secret-1")["ok"]
        assert "wrong signature for account app-key" in refused_because(
            "AclTopic", "app-key", "not-the-secret")
        assert "no AccessKey" in refused_because("AclTopic")
        assert "may not publish to topic ReadOnlyTopic" in refused_because(
            "ReadOnlyTopic", "app-key", "app-secret-1")

        acl.write_text(ACL.replace("ReadOnlyTopic=SUB", "ReadOnlyTopic=PUB|SUB"))
        wait_until(lambda: trysend("ReadOnlyTopic", "app-key", "app-secret-1")["ok"],
                   "the edited ACL file in effect", 30)
        stored = asyncio.run(read_all(d.namesrv, 0, "AclTopic"))
        assert sum(map(len, stored.values())) == 1  # only the signed send got in
    finally:
        d.stop()
