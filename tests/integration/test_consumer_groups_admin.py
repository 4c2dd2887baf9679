"""Consumer groups as operators manage them, on a real broker: resetOffsetByTime moves a
group back to re-read from a time (running push consumers jump too), `force` decides
whether a queue may move forward past what the group has not read, skipAccumulatedMessage
jumps a running consumer over its backlog, and a subscription group's config is honoured
(consumeEnable, retryMaxTimes) and kept across a restart."""
import asyncio
import json
import time

import pytest

from ledgermq import ConsumeStatus, Message, MQClientError, Producer, PullConsumer, PushConsumer
from ledgermq.client.admin import Admin
from ledgermq.remoting import ResponseCode

from ..wait import until
from .test_cli import cli
from .test_transactions import read_all


async def send(ns: str, topic: str, bodies: list[bytes], queue: int | None = None) -> None:
    async with Producer("groups-p", ns) as p:
        q = (await p.queues(topic))[queue] if queue is not None else None
        for b in bodies:
            await p.send(Message(topic, b), q)


def push(ns: str, group: str, topic: str, got: list, gate: asyncio.Event | None = None,
         **kw) -> PushConsumer:
    async def listener(msgs):
        if gate is not None:
            await gate.wait()
        got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(group, ns, consume_from="CONSUME_FROM_FIRST_OFFSET",
                     pull_suspend_ms=300, **kw)
    c.subscribe(topic)
    c.register_listener(listener)
    return c


def test_reset_by_time_makes_a_running_consumer_read_again_from_then(dev):
    d = dev()

    async def main():
        await send(d.namesrv, "Replay", [b"old-%d" % i for i in range(5)])
        await asyncio.sleep(0.05)  # store times on each side of `then` differ
        then = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await send(d.namesrv, "Replay", [b"new-%d" % i for i in range(5)])
        got: list[bytes] = []
        c = push(d.namesrv, "replayers", "Replay", got)
        await c.start()
        try:
            await until(lambda: len(got) == 10, "everything read once")
            async with Admin(d.namesrv) as a:
                await a.reset_offset("replayers", "Replay", then)
            await until(lambda: len(got) == 15, "the messages since then read again")
            assert sorted(got[10:]) == [b"new-%d" % i for i in range(5)]
        finally:
            await c.shutdown()
    asyncio.run(main())


def test_without_force_a_reset_never_moves_a_queue_past_unread_messages(dev):
    d = dev()

    async def main():
        await send(d.namesrv, "Force", [b"m%d" % i for i in range(10)], queue=0)
        async with PullConsumer("forcers", d.namesrv) as c:
            q = (await c.fetch_queues("Force"))[0]
            await c.commit(q, 3)
            async with Admin(d.namesrv) as a:
                rows = await a.reset_offset("forcers", "Force", -1, force=False)
                assert [r["offset"] for r in rows if r["queueId"] == 0] == [3]  # kept
                rows = await a.reset_offset("forcers", "Force", -1, force=True)
                assert [r["offset"] for r in rows if r["queueId"] == 0] == [10]
            assert await c.query_offset(q) == 10
    asyncio.run(main())


def test_skip_accumulated_messages_jumps_a_running_consumer_to_the_end(dev):
    d = dev()

    async def main():
        gate, got = asyncio.Event(), []
        c = push(d.namesrv, "skippers", "Backlog", got, gate)
        await send(d.namesrv, "Backlog", [b"first"], queue=0)
        await c.start()
        try:
            await send(d.namesrv, "Backlog", [b"backlog-%d" % i for i in range(200)], queue=0)
            async with Admin(d.namesrv) as a:
                rows = await a.reset_offset("skippers", "Backlog", -1)  # skipAccumulated
            assert [r["offset"] for r in rows if r["queueId"] == 0] == [201]
            await until(lambda: c.queues and all(s.next_offset >= 201 for mq, s in
                        c.queues.items() if mq.topic == "Backlog" and mq.queue_id == 0),
                        "the consumer moved to the end")
            gate.set()
            await send(d.namesrv, "Backlog", [b"after"], queue=0)
            await until(lambda: b"after" in got, "a message sent after the skip")
            backlog = [b for b in got if b.startswith(b"backlog-")]
            assert len(backlog) < 100, f"{len(backlog)} of the skipped backlog consumed"
        finally:
            gate.set()
            await c.shutdown()
    asyncio.run(main())


def test_a_disabled_group_pulls_nothing_until_enabled_again(dev):
    d = dev()
    ns = ["-n", d.namesrv]

    async def pull():
        async with PullConsumer("paused", d.namesrv) as c:
            q = (await c.fetch_queues("Gate"))[0]
            return await c.pull(q, 0, 10)
    asyncio.run(send(d.namesrv, "Gate", [b"x"], queue=0))
    cli("admin", "updateSubGroup", *ns, "-g", "paused", "-c", "DefaultCluster", "-s", "false")
    with pytest.raises(MQClientError) as e:
        asyncio.run(pull())
    assert e.value.code == ResponseCode.NO_PERMISSION
    assert "subscription group no permission, paused" in str(e.value)
    shown = json.loads(cli("admin", "getConsumerConfig", *ns, "-g", "paused", "--json").stdout)
    assert shown["broker-a"]["paused"]["consumeEnable"] is False
    cli("admin", "updateSubGroup", *ns, "-g", "paused", "-c", "DefaultCluster", "-s", "true")
    assert [m.body for m in asyncio.run(pull()).messages] == [b"x"]


def test_retry_max_times_of_the_group_sends_a_failing_message_to_the_dlq(dev, tmp_path):
    d = dev(data=tmp_path / "broker")
    ns = ["-n", d.namesrv]
    cli("admin", "updateSubGroup", *ns, "-g", "fragile", "-c", "DefaultCluster", "-r", "1")
    ports = d.ports
    d.stop()  # the config is kept across a restart
    d.start(*ports)
    shown = json.loads(cli("admin", "getConsumerConfig", *["-n", d.namesrv], "-g", "fragile",
                           "--json").stdout)
    assert shown["broker-a"]["fragile"]["retryMaxTimes"] == 1

    async def main():
        tries = []
        c = PushConsumer("fragile", d.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                         pull_suspend_ms=300)
        c.subscribe("Brittle")
        c.register_listener(lambda msgs: tries.extend(msgs) or ConsumeStatus.RECONSUME_LATER)
        await send(d.namesrv, "Brittle", [b"bad"])
        await c.start()
        try:
            dlq = await until(lambda: read_all(d.namesrv, "%DLQ%fragile"), "the dead letter",
                              timeout=20, interval=0.2)
            assert dlq == [b"bad"] and len(tries) == 2  # first delivery + 1 retry
        finally:
            await c.shutdown()
    asyncio.run(main())


def test_broadcast_consumption_needs_consume_broadcast_enable(dev, tmp_path):
    d = dev()
    ns = ["-n", d.namesrv]
    cli("admin", "updateSubGroup", *ns, "-g", "fanout", "-c", "DefaultCluster", "-d", "false")

    async def main():
        await send(d.namesrv, "News", [b"n"], queue=0)
        got: list[bytes] = []
        c = push(d.namesrv, "fanout", "News", got, message_model="BROADCASTING",
                 offset_dir=str(tmp_path))
        await c.start()
        try:
            async with PullConsumer("fanout", d.namesrv) as p:
                q = (await p.fetch_queues("News"))[0]
                with pytest.raises(MQClientError) as e:
                    await p.pull(q, 0, 10)
            assert "can not consume by broadcast way" in str(e.value) and got == []
        finally:
            await c.shutdown()
    asyncio.run(main())
