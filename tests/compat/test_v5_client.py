"""RocketMQ 5's official Python client (rocketmq-python-client==5.1.2, gRPC only) against a
ledgermq broker: producer (normal, FIFO, delay, transactional with check-back),
SimpleConsumer (receive, ack, invisible duration, redelivery), PushConsumer; and topics
shared with remoting clients both ways."""
import asyncio
import json
import os
import signal
import subprocess
import time

import pytest

from ledgermq import Message, Producer
from ledgermq.client.admin import Admin

from ..dev_process import DevProcess
from .drivers import create_topic
from ..integration.load import read_all
from ..wait import wait_until


@pytest.fixture
def broker(tmp_path):
    d = DevProcess(tmp_path / "dev", {"grpcServerPort": "0", "transactionTimeOut": "1000",
                                      "transactionCheckInterval": "500",
                                      "minInvisibleTimeMillsForRecv": "1000"}).start()
    yield d
    d.stop()


def create(d, topic, queues=4):
    create_topic(d.namesrv, topic, queues)


def test_v5_producer_and_simple_consumer_share_topics_with_remoting_clients(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5Normal")
    sent = v5(grpc, "produce", "V5Normal", 20, "normal")["receipts"]
    assert len({r["id"] for r in sent}) == 20
    got = v5(grpc, "consume", "V5Group", "V5Normal", 20, 30)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"normal-{i}" for i in range(20))
    one = next(m for m in got if m["body"] == "normal-3")
    assert one["tag"] == "TagA" and one["keys"] == ["key-3"] and one["attempt"] == 1
    assert one["properties"] == {"color": "red"}
    assert {m["id"] for m in got} == {r["id"] for r in sent}

    # what a RocketMQ 5 producer wrote, a remoting consumer reads (properties mapped)
    stored = [m for q in asyncio.run(read_all(d.namesrv, topic="V5Normal")).values() for m in q]
    assert sorted(stored) == sorted(f"normal-{i}".encode() for i in range(20))

    # and the other way round: a remoting producer's messages reach a gRPC consumer
    async def remoting_send():
        async with Producer("remoting-side", d.namesrv) as p:
            for i in range(5):
                m = Message("V5Normal", f"remoting-{i}".encode(), tags="TagB", keys=f"rk{i}")
                assert (await p.send(m)).status.value == "SEND_OK"
    asyncio.run(remoting_send())
    back = v5(grpc, "consume", "V5Group", "V5Normal", 5, 30, "TagB")["messages"]
    assert sorted(m["body"] for m in back) == [f"remoting-{i}" for i in range(5)]
    assert all(m["tag"] == "TagB" for m in back)


@pytest.mark.compat  # (make compat: waits out an invisible duration, ~14 s)
def test_v5_simple_consumer_redelivery_after_the_invisible_duration(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5Redeliver", 1)
    v5(grpc, "produce", "V5Redeliver", 1, "normal")
    out = v5(grpc, "redeliver", "V5RedeliverGroup", "V5Redeliver")
    first, again = out["first"], out["again"]
    assert first["body"] == again["body"] == "normal-0"
    assert first["id"] == again["id"]  # the same message, delivered again
    assert (first["attempt"], again["attempt"]) == (1, 2)
    assert again["at"] - first["at"] >= 2.0 - 0.2  # not before its invisible duration
    assert "INVALID_RECEIPT_HANDLE" in out["stale_ack"] or "40013" in out["stale_ack"]
    assert out["after_change"] == []  # the extended delivery stayed invisible
    # acked at last: nothing left for the group
    assert v5(grpc, "consume", "V5RedeliverGroup", "V5Redeliver", 1, 4)["messages"] == []


def test_v5_delay_messages_wait_for_their_delivery_time(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5Delay", 2)
    sent = v5(grpc, "produce", "V5Delay", 3, "delay")["receipts"]
    got = v5(grpc, "consume", "V5DelayGroup", "V5Delay", 3, 30)["messages"]
    assert sorted(m["body"] for m in got) == [f"delay-{i}" for i in range(3)]
    due = min(r["due"] for r in sent)  # whole seconds, as the client sends it
    assert min(m["at"] for m in got) >= due - 0.05  # never early


def test_v5_fifo_group_gets_each_message_group_in_order(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5Fifo", 4)

    async def fifo_group():
        async with Admin(d.namesrv) as a:
            await a.update_sub_group({"groupName": "V5FifoGroup", "consumeMessageOrderly": True})
    asyncio.run(fifo_group())
    v5(grpc, "produce", "V5Fifo", 10, "fifo")
    order = v5(grpc, "fifo", "V5FifoGroup", "V5Fifo")["order"]
    held = order[0]
    assert len({m["body"] for m in order}) == 10
    for g in ("g0", "g1"):  # each message group in the order it was sent
        bodies = [int(m["body"].split("-")[1]) for m in order if m["group"] == g]
        assert bodies == sorted(bodies), f"group {g} out of order: {bodies}"
    # the held message came again (attempt 2), and nothing of its group came in between
    again = next(i for i, m in enumerate(order) if i and m["body"] == held["body"])
    assert order[again]["attempt"] == 2
    assert all(m["group"] != held["group"] for m in order[1:again])
    assert order[again]["at"] - held["at"] >= 3.0 - 0.2


def test_v5_transactions_commit_rollback_and_check_back(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5Tx", 2)
    out = v5(grpc, "transaction", "V5Tx")
    assert [a["id"] for a in out["asked"]] == [out["open"]]  # only the open one is asked
    assert out["asked"][0]["at"] - out["open_sent_at"] >= 1.0 - 0.2  # transactionTimeOut
    got = v5(grpc, "consume", "V5TxGroup", "V5Tx", 2, 20)["messages"]
    assert sorted(m["body"] for m in got) == ["commit", "open"]  # rollback never shows


def test_v5_push_consumer_gets_a_failed_message_again(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5Push", 2)
    v5(grpc, "produce", "V5Push", 6, "normal")
    got = v5(grpc, "push", "V5PushGroup", "V5Push", 6, 60)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"normal-{i}" for i in range(6))
    assert all(m["attempt"] == 2 for m in got)  # failed once, then delivered again


def test_v5_fifo_push_consumer_keeps_each_message_group_in_order(broker, v5):
    d, grpc = broker, broker.ready["grpc"]
    create(d, "V5PushFifo", 4)

    async def fifo_group():
        async with Admin(d.namesrv) as a:
            await a.update_sub_group({"groupName": "V5PushFifoGroup",
                                      "consumeMessageOrderly": True})
    asyncio.run(fifo_group())
    v5(grpc, "produce", "V5PushFifo", 12, "fifo")
    got = v5(grpc, "pushfifo", "V5PushFifoGroup", "V5PushFifo", 12, 60)["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"fifo-{i}" for i in range(12))
    for g in ("g0", "g1"):
        bodies = [int(m["body"].split("-")[1]) for m in got if m["group"] == g]
        assert bodies == sorted(bodies), f"group {g} out of order: {bodies}"


V5_ACL = """
accounts:
  - accessKey: admin-key
    secretKey: admin-secret-1
    admin: true
  - accessKey: app-key
    secretKey: app-secret-1
    defaultGroupPerm: SUB
    topicPerms: [V5Acl=PUB|SUB, V5ReadOnly=SUB]
"""


def test_v5_clients_with_acl(tmp_path, v5, monkeypatch):
    """aclEnable: the official client's credentials (its authorization metadata) are
    accepted; a wrong secret is UNAUTHORIZED; an account that may only read a topic
    cannot send to it (the broker's own permission check, reached through gRPC)."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(V5_ACL)
    d = DevProcess(tmp_path / "dev", {"grpcServerPort": "0", "aclEnable": "true",
                                      "aclFile": str(acl),
                                      "minInvisibleTimeMillsForRecv": "1000"}).start()
    try:
        monkeypatch.setenv("LEDGERMQ_ACCESS_KEY", "admin-key")
        monkeypatch.setenv("LEDGERMQ_SECRET_KEY", "admin-secret-1")
        create(d, "V5Acl", 1)
        create(d, "V5ReadOnly", 1)
        grpc = d.ready["grpc"]
        monkeypatch.setenv("V5_ACCESS_KEY", "app-key")
        monkeypatch.setenv("V5_SECRET_KEY", "app-secret-1")
        assert len(v5(grpc, "produce", "V5Acl", 3, "normal")["receipts"]) == 3
        got = v5(grpc, "consume", "V5AclGroup", "V5Acl", 3, 20)["messages"]
        assert sorted(m["body"] for m in got) == [f"normal-{i}" for i in range(3)]
        with pytest.raises(AssertionError, match="may not publish to topic V5ReadOnly"):
            v5(grpc, "produce", "V5ReadOnly", 1, "normal")
        monkeypatch.setenv("V5_SECRET_KEY", "not-the-secret")
        with pytest.raises(AssertionError, match="failed to fetch topic:V5Acl route"):
            v5(grpc, "produce", "V5Acl", 1, "normal")
        log = tmp_path / "home" / "logs" / "rocketmq_python" / "rocketmq_client.log"
        assert "40100, UNAUTHORIZED: wrong signature for account app-key" in log.read_text()
    finally:
        d.stop()


def dledger_with_topic(d, topic, queues):
    """A 3-node DLedger group up, with `topic`; (state, leader process, gRPC endpoints)."""
    from ledgermq.localcluster.cluster import status, up
    state = up("dledger", 3, d, grpc=True)

    def leader():
        alive = [p for p in status(d)["processes"]
                 if p.get("alive") and p.get("role") in ("MASTER", "LEADER")]
        return alive[0] if len(alive) == 1 else None
    old = wait_until(leader, "a leader", 30)

    async def create_topic():
        async with Admin(state["namesrv"]) as a:
            await a.update_topic(topic, read_queues=queues, write_queues=queues)
    asyncio.run(create_topic())
    brokers = [p for p in state["processes"] if p["kind"] == "broker"]
    return state, old, ";".join(f"127.0.0.1:{p['grpcPort']}" for p in brokers), leader


@pytest.mark.compat  # (make compat: a 3-broker group, a kill and a failover, ~21 s; make test keeps the v5 client's core cases)
def test_v5_acked_messages_stay_acked_and_unacked_come_back_after_a_failover(tmp_path, v5):
    """Ten received from one queue, the last five acked, the first five still out: after
    the leader is killed the new leader delivers exactly the first five again (the acks
    were in the Raft log before they were answered; a gap below them kept the consumer
    offset at 0)."""
    from ledgermq.localcluster.cluster import down
    d = tmp_path / "dledger"
    try:
        state, old, endpoints, leader = dledger_with_topic(d, "V5Hold", 1)
        v5(endpoints, "produce", "V5Hold", 10, "normal")
        held = v5(endpoints, "hold", "V5HoldGroup", "V5Hold", 10)
        assert sorted(held["received"]) == sorted(f"normal-{i}" for i in range(10))
        os.kill(old["pid"], signal.SIGKILL)
        wait_until(lambda: (lambda p: p and p["name"] != old["name"])(leader()),
                   "a new leader", 30)
        again = v5(endpoints, "consume", "V5HoldGroup", "V5Hold", 6, 15)["messages"]
    finally:
        down(d)
    assert sorted(m["body"] for m in again) == [f"normal-{i}" for i in range(5)]
    assert all(m["attempt"] == 1 for m in again)  # the new leader's first delivery


@pytest.mark.slow  # (make test-slow: the default run keeps near 15 minutes)
def test_v5_clients_keep_going_across_a_dledger_failover_without_loss(tmp_path, v5_python):
    """A producer and a SimpleConsumer given every broker's gRPC endpoint; the leader is
    killed under load: every send the producer had acknowledged is received, sends and
    receives resume on the new leader (the clients refresh routes 10 s after they start,
    then every 30 s: 20 s of load with the kill after 50 sends sees the first refresh)."""
    from ledgermq.localcluster.cluster import down
    from .conftest import V5_WORKER

    d = tmp_path / "dledger"
    try:
        state, old, endpoints, leader = dledger_with_topic(d, "V5Failover", 2)
        progress = tmp_path / "progress"
        (tmp_path / "home").mkdir()
        worker = subprocess.Popen(
            [str(v5_python), str(V5_WORKER), endpoints, "failover", "V5FailGroup",
             "V5Failover", "20", str(progress)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path / "home")})
        try:
            wait_until(lambda: progress.exists() and progress.read_text().strip().isdigit()
                       and int(progress.read_text()) >= 50, "50 acknowledged sends", 60)
            killed_at = time.time()
            os.kill(old["pid"], signal.SIGKILL)
            out, err = worker.communicate(timeout=180)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        assert worker.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
    finally:
        down(d)
    acked = {a["body"] for a in result["acked"]}
    received = {r["body"] for r in result["received"]}
    assert acked - received == set(), f"acknowledged but never received: {acked - received}"
    assert any(a["at"] > killed_at + 1 for a in result["acked"]), "no send after the failover"
    assert any(r["at"] > killed_at + 1 for r in result["received"]), "no receive after it"
