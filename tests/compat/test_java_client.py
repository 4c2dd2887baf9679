"""RocketMQ's Java remoting client against `ledgermq dev` (#30): org.apache.rocketmq's
rocketmq-client 5.5.0 (the anchor's pom resolves it, bench/rocketmq_anchor.py) and 4.9.8
(java/v4/pom.xml), both from Maven Central,
runs tests/compat/java/JavaClient.java. Sync and batch sends with JSON and with binary
(ROCKETMQ) headers; a push consumer with a tag filter that fails every message once, so
each comes back through the group's %RETRY% topic. Skips, saying why, only where Java or
Maven is missing. The consumer tests run in `make compat` (marked compat)."""
import asyncio
from pathlib import Path

import pytest

from bench.rocketmq_anchor import classpath, compile_java, missing_tools
from ledgermq.client.admin import Admin

from ..dev_process import DevProcess
from .drivers import run_java
from ..integration.load import read_all, until_read

pytestmark = pytest.mark.skipif(missing_tools() is not None,
                                reason=f"RocketMQ's Java client needs Java and Maven: "
                                       f"{missing_tools()}")
DRIVER = Path(__file__).with_name("java") / "JavaClient.java"
CACHE = Path(__file__).parents[2] / ".cache" / "java-compat"
# the client's version -> the pom resolving it (5.5.0: the anchor's; 4.9.8: the newest 4.x)
POMS = {"5.5.0": None, "4.9.8": DRIVER.parent / "v4"}
# the versions as test parameters: 4.9.8's runs (its own classpath and build) in make compat
CLIENTS = ["5.5.0", pytest.param("4.9.8", marks=pytest.mark.compat)]


def client_classpath(client: str = "5.5.0") -> str:
    pom = POMS[client]
    return classpath(pom) if pom else classpath()


def compiled(client: str = "5.5.0") -> str:
    """The driver's classes, compiled once per version of its source and of the client."""
    return compile_java(DRIVER, CACHE / client, client_classpath(client))


def java(*args, serialize="JSON", timeout=120, client="5.5.0") -> list[dict]:
    # (a rebalance a second, not every 20 s: the retry topic's route comes after the start)
    return run_java("JavaClient", compiled(client), client_classpath(client), *args,
                    options=(f"-Drocketmq.serialize.type={serialize}",
                             "-Drocketmq.client.rebalance.waitInterval=1000"), timeout=timeout)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):  # (open transactions checked back within a second)
    d = DevProcess(tmp_path_factory.mktemp("java"), {
        "transactionTimeOut": "400", "transactionCheckInterval": "200"}).start()
    yield d
    d.stop()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("serialize", ["JSON", "ROCKETMQ"])
def test_sync_and_batch_sends_with_either_header_encoding(dev, serialize, client):
    topic = f"Java{serialize.title()}{client.replace('.', '')}"
    sent = java("produce", dev.namesrv, topic, 3, "TagA", serialize=serialize, client=client)
    assert [s["status"] for s in sent] == ["SEND_OK"] * 4, sent
    assert len(sent[-1]["msgId"].split(",")) == 3  # the batch: one id a message
    offsets = {(s["queueId"], s["queueOffset"]) for s in sent}
    assert len(offsets) == 4  # each send stored once, where it said


@pytest.mark.compat  # (make compat: a consumer JVM's start-up and rebalance)
@pytest.mark.parametrize("client", POMS)
def test_a_push_consumer_gets_each_message_again_through_the_retry_topic(dev, client):
    tag = client.replace(".", "")  # (names allow no dot)
    topic, group = f"JavaRetry{tag}", f"java-retry-{tag}"
    java("produce", dev.namesrv, topic, 3, "TagA")
    java("produce", dev.namesrv, topic, 2, "TagB")  # filtered out below
    got = java("push", dev.namesrv, group, topic, "TagA", 6, 90, "true", client=client)
    assert sorted(g["body"] for g in got) == sorted(
        [f"sync-{i}" for i in range(3)] + [f"batch-{i}" for i in range(3)]), got
    assert {g["tags"] for g in got} == {"TagA"}
    assert {g["reconsumeTimes"] for g in got} == {"1"}  # failed once, then delivered again


@pytest.mark.compat  # (make compat: a consumer JVM's start-up and rebalance)
@pytest.mark.parametrize("client", POMS)
def test_async_oneway_orderly_delayed_and_transactional_sends(dev, client):
    topic = f"JavaKinds{client.replace('.', '')}"
    out = java("kinds", dev.namesrv, topic, 60, client=client)
    sent = [o for o in out if "status" in o]
    assert [o["status"] for o in sent] == ["SEND_OK"] * 6, out  # 2 async, 3 orderly, delayed
    orderly = [o for o in sent[2:5]]
    assert len({o["queueId"] for o in orderly}) == 1  # one order key: one queue
    assert [int(o["queueOffset"]) for o in orderly] == sorted(int(o["queueOffset"])
                                                              for o in orderly)
    want = sorted(["async-0", "async-1", "oneway", "orderly-0", "orderly-1", "orderly-2",
                   "delayed", "tx-commit", "tx-unknown"])  # (never the rolled-back one)
    read = until_read(dev.namesrv, topic, len(want))
    assert read == want, out
    checked = [o for o in out if "checked" in o]
    assert checked and {c["checked"] for c in checked} == {"tx-unknown"}
    assert {c["topic"] for c in checked} == {topic}  # the topic it was sent to


@pytest.mark.compat  # (make compat: a consumer JVM's start-up and rebalance)
@pytest.mark.parametrize("client", POMS)
def test_a_lite_pull_consumer_reads_what_was_sent(dev, client):
    """RocketMQ 5's DefaultLitePullConsumer pulls with LITE_PULL_MESSAGE (361), which
    ledgermq serves as a pull (before, it answered "not supported" and the consumer read
    nothing, quietly)."""
    topic = f"JavaLite{client.replace('.', '')}"
    java("produce", dev.namesrv, topic, 3, "TagA")
    got = java("lite", dev.namesrv, f"java-lite-{client.replace('.', '')}", topic, 6, 60,
               client=client)
    assert sorted(g["read"] for g in got) == sorted(
        [f"sync-{i}" for i in range(3)] + [f"batch-{i}" for i in range(3)]), got


# (the 5.5.0 client's refused sends take ~6 s each: that one in make compat, 4.9.8's too)
@pytest.mark.parametrize("client", [pytest.param(c, marks=pytest.mark.compat) for c in POMS])
def test_acl_signatures_of_the_java_client(tmp_path, monkeypatch, client):
    """aclEnable: the Java client signing with AclClientRPCHook sends with the right key;
    a wrong secret, no credentials and a topic the account may only read are refused, each
    with the broker's reason in the client's exception."""
    from .test_cpp_client import ACL
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    d = DevProcess(tmp_path / "dev", {"aclEnable": "true", "aclFile": str(acl)}).start()
    try:
        monkeypatch.setenv("LEDGERMQ_ACCESS_KEY", "admin-key")
        monkeypatch.setenv("LEDGERMQ_SECRET_KEY", "admin-secret-1")

        async def topics():
            async with Admin(d.namesrv) as a:
                for t in ("AclTopic", "ReadOnlyTopic"):
                    await a.update_topic(t, read_queues=1, write_queues=1)
        asyncio.run(topics())
        (ok,) = java("acl", d.namesrv, "AclTopic", "app-key", "app-secret-1", client=client)
        assert ok == {"ok": "true", "status": "SEND_OK"}
        for args, reason in [(("AclTopic", "app-key", "not-the-secret"),
                              "wrong signature for account app-key"),
                             (("AclTopic", "-", "-"), "no AccessKey"),
                             (("ReadOnlyTopic", "app-key", "app-secret-1"),
                              "may not publish to topic ReadOnlyTopic")]:
            (refused,) = java("acl", d.namesrv, *args, client=client)
            assert refused["ok"] == "false" and reason in refused["error"], refused
        stored = asyncio.run(read_all(d.namesrv, 0, "AclTopic"))
        assert sum(map(len, stored.values())) == 1  # only the signed send got in
    finally:
        d.stop()


@pytest.mark.compat  # (make compat: a 3-broker group, a kill and a catch-up, ~40 s)
@pytest.mark.parametrize("mode", ["dledger", "controller"])
def test_a_java_sender_across_a_kill_of_the_leader(tmp_path, mode):
    """The Java client sending one message at a time while the group's leader (master)
    is killed -9: its sends succeed again within seconds, and every message it was
    acknowledged is read back from the queues the route names."""
    from bench.rocketmq_bench import failover
    from bench.rocketmq_sides import side
    with side("ledgermq", mode, tmp_path / "group") as s:
        out = failover(s, 1, tmp_path)
    assert out["acked"] > 0 and out["lost"] == 0, out
    assert out["max_s"] < 10, out
