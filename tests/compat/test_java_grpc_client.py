"""RocketMQ 5's official Java gRPC client (rocketmq-client-java 5.0.8 from Maven Central,
bench/anchors/rocketmq/grpc-client/pom.xml) against ledgermq's gRPC endpoint (#30):
Producer (normal, FIFO, delay, transactions with check-back), SimpleConsumer (receive, ack,
change invisible duration) and PushConsumer, through tests/compat/java/GrpcClient.java
(compiled once into .cache/java-compat/). Skips, saying why, only where Java or Maven is
missing."""
import asyncio
from pathlib import Path

import pytest

from bench.rocketmq_anchor import GRPC_CLIENT_POM_DIR, classpath, compile_java, missing_tools
from ledgermq.client.admin import Admin

from ..dev_process import DevProcess
from .drivers import create_topic, run_java

# (make compat, all of it: make test stays within its 20 minutes)
pytestmark = [pytest.mark.skipif(missing_tools() is not None,
                                 reason=f"RocketMQ's Java gRPC client needs Java and Maven: "
                                        f"{missing_tools()}"),
              pytest.mark.compat]
DRIVER = Path(__file__).with_name("java") / "GrpcClient.java"
CACHE = Path(__file__).parents[2] / ".cache" / "java-compat"


def java(*args, timeout=120, props: dict[str, str] | None = None) -> dict:
    """Runs one GrpcClient command; `props` become -D options (ssl, ak, sk)."""
    cp = classpath(GRPC_CLIENT_POM_DIR)
    return run_java("GrpcClient", compile_java(DRIVER, CACHE, cp), cp, *args,
                    options=(f"-Drocketmq.log.root={CACHE / 'grpc-logs'}",
                             *(f"-D{k}={v}" for k, v in (props or {}).items())),
                    timeout=timeout)[-1]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):  # (open transactions checked back within a second)
    d = DevProcess(tmp_path_factory.mktemp("java-grpc"), {
        "grpcServerPort": "0", "transactionTimeOut": "400",
        "transactionCheckInterval": "200"}).start()
    yield d
    d.stop()


def create(d: DevProcess, topic: str, queues: int = 2) -> str:
    create_topic(d.namesrv, topic, queues)
    return d.ready["grpc"]


def test_producer_and_simple_consumer(dev):
    ep = create(dev, "JavaV5")
    sent = java("produce", ep, "JavaV5", 5, "normal")
    got = java("receive", ep, "java-v5", "JavaV5", 5, 30)["messages"]
    assert sorted(m["body"] for m in got) == [f"normal-{i}" for i in range(5)]
    assert {m["id"] for m in got} == set(sent["ids"])
    one = next(m for m in got if m["body"] == "normal-3")
    assert (one["tag"], one["keys"], one["attempt"]) == ("TagJava", ["key-3"], 1)
    # all acked: nothing left for the group
    assert java("receive", ep, "java-v5", "JavaV5", 1, 3)["messages"] == []


@pytest.mark.compat  # (make compat: five client JVMs)
def test_fifo_delay_and_transactions(dev):
    ep = create(dev, "JavaV5Kinds")
    java("produce", ep, "JavaV5Kinds", 4, "fifo")
    delayed = java("produce", ep, "JavaV5Kinds", 1, "delay")
    java("produce", ep, "JavaV5Kinds", 1, "tx-commit")
    java("produce", ep, "JavaV5Kinds", 1, "tx-rollback")
    checked = java("produce", ep, "JavaV5Kinds", 1, "tx-check")
    assert checked["checked"] == ["tx-check-0"]  # the broker asked back about the open one
    got = java("receive", ep, "java-v5-kinds", "JavaV5Kinds", 7, 40)["messages"]
    assert sorted(m["body"] for m in got) == sorted(
        [f"fifo-{i}" for i in range(4)] + ["delay-0", "tx-commit-0", "tx-check-0"])
    fifo = [m for m in got if m["body"].startswith("fifo")]
    assert {m["group"] for m in fifo} == {"group-0", "group-1"}
    for group in ("group-0", "group-1"):  # each message group in the order it was sent
        mine = [m["body"] for m in fifo if m["group"] == group]
        assert mine == sorted(mine, key=lambda b: int(b.split("-")[1]))
    assert any(m["id"] == delayed["ids"][0] for m in got)


@pytest.mark.compat  # (make compat: waits out an invisible duration)
def test_changed_invisible_duration_redelivers_the_same_message(dev):
    ep = create(dev, "JavaV5Redeliver", 1)
    java("produce", ep, "JavaV5Redeliver", 1, "normal")
    out = java("redeliver", ep, "java-v5-redeliver", "JavaV5Redeliver")
    first, again = out["first"], out["again"]
    assert (first["id"], first["body"]) == (again["id"], again["body"]) == (
        first["id"], "normal-0")
    assert (first["attempt"], again["attempt"]) == (1, 2)
    assert again["at"] - first["at"] >= 2.0 - 0.2  # not before its new invisible time


@pytest.mark.compat  # (make compat: the PushConsumer's close waits out its long poll, ~20 s)
def test_push_consumer_gets_everything(dev):
    ep = create(dev, "JavaV5Push")
    # (30: normal-23 and normal-27 have CRC32s under 0x10000000, whose digest strings the
    # client once found corrupted, discarding those messages)
    java("produce", ep, "JavaV5Push", 30, "normal")
    got = java("push", ep, "java-v5-push", "JavaV5Push", 30, 60)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"normal-{i}" for i in range(30))


@pytest.mark.compat
def test_fifo_push_consumer_keeps_each_message_groups_order(dev):
    """A FIFO group (consumeMessageOrderly) through the PushConsumer: every message once,
    and within each message group in the order sent."""
    ep = create(dev, "JavaV5FifoPush")

    async def orderly():
        async with Admin(dev.namesrv) as a:
            await a.update_sub_group({"groupName": "java-v5-fifo-push",
                                      "consumeMessageOrderly": True})
    asyncio.run(orderly())
    java("produce", ep, "JavaV5FifoPush", 20, "fifo")
    got = java("push", ep, "java-v5-fifo-push", "JavaV5FifoPush", 20, 60)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"fifo-{i}" for i in range(20))
    for group in ("group-0", "group-1"):
        seq = [int(m["body"].split("-")[1]) for m in got if m["group"] == group]
        assert seq == sorted(seq) and len(seq) == 10, (group, seq)


ACL = """
accounts:
  - accessKey: java-key
    secretKey: java-secret-1
    defaultGroupPerm: SUB
    topicPerms: [JavaV5Acl=PUB|SUB]
  - accessKey: admin-key
    secretKey: admin-secret-1
    admin: true
"""


@pytest.mark.compat
def test_acl_credentials_are_checked(tmp_path, monkeypatch):
    """aclEnable: the client's StaticSessionCredentialsProvider signs each call; the right
    secret sends and receives, a wrong one is refused as UNAUTHORIZED."""
    (tmp_path / "plain_acl.yml").write_text(ACL)
    d = DevProcess(tmp_path / "dev", {"grpcServerPort": "0", "aclEnable": "true",
                                      "aclFile": str(tmp_path / "plain_acl.yml")}).start()
    try:
        monkeypatch.setenv("LEDGERMQ_ACCESS_KEY", "admin-key")  # (our Admin's account)
        monkeypatch.setenv("LEDGERMQ_SECRET_KEY", "admin-secret-1")
        ep, right = create(d, "JavaV5Acl"), {"ak": "java-key", "sk": "java-secret-1"}
        java("produce", ep, "JavaV5Acl", 2, "normal", props=right)
        got = java("receive", ep, "java-v5-acl", "JavaV5Acl", 2, 30, props=right)["messages"]
        assert sorted(m["body"] for m in got) == ["normal-0", "normal-1"]
        with pytest.raises(AssertionError, match="UNAUTHORIZED"):
            java("produce", ep, "JavaV5Acl", 1, "normal",
                 props={"ak": "java-key", "sk": "not-the-secret"})
    finally:
        d.stop()
