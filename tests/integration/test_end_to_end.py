"""Produce and consume through a real `ledgermq dev` process, in every client mode."""
import asyncio
import time

import pytest

from ledgermq import (
    ConsumeStatus, Message, MQClientError, Producer, PullConsumer, PullStatus, PushConsumer,
    SendStatus, SyncProducer,
)
from ledgermq.client.admin import Admin
from ledgermq.remoting import ResponseCode

from ..wait import until


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def drain(consumer: PullConsumer, topic: str, expected: int, expression="*",
                deadline_s=10.0) -> dict:
    """Pull every queue of `topic` from 0 until `expected` messages came back (the topic
    may not exist yet)."""
    got: dict[int, list] = {}
    offsets: dict = {}

    async def more():
        if not offsets:
            offsets.update({q: 0 for q in await consumer.fetch_queues(topic)})
        for q in offsets:
            r = await consumer.pull(q, offsets[q], 64, expression)
            if r.status is PullStatus.FOUND:
                got.setdefault(q.queue_id, []).extend(r.messages)
            offsets[q] = r.next_begin_offset
        return sum(len(v) for v in got.values()) >= expected
    await until(more, f"{expected} messages of {topic}", deadline_s)
    return got


def test_send_modes_and_pull_back(dev):
    d = dev()

    async def main():
        async with Producer("p", d.namesrv) as p, PullConsumer("c", d.namesrv) as c:
            r = await p.send(Message("E2E", b"single", tags="A", keys=["k1", "k2"]))
            assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32
            rb = await p.send_batch([Message("E2E", b"batch-%d" % i, tags="B") for i in range(10)])
            assert rb.status is SendStatus.SEND_OK and len(rb.msg_id.split(",")) == 10
            await p.send_oneway(Message("E2E", b"oneway", tags="C"))
            for i in range(20):
                await p.send_orderly(Message("E2E", b"order-%d" % i, tags="D"), "order-key")
            got = await drain(c, "E2E", 32)
            bodies = [m.body for ms in got.values() for m in ms]
            assert sorted(bodies) == sorted([b"single", b"oneway"] + [b"batch-%d" % i for i in range(10)]
                                            + [b"order-%d" % i for i in range(20)])
            ordered = [m.body for ms in got.values() for m in ms if m.tags == "D"]
            assert ordered == [b"order-%d" % i for i in range(20)]  # one queue, in order
            single = next(m for ms in got.values() for m in ms if m.body == b"single")
            assert single.keys == ["k1", "k2"] and single.msg_id == r.msg_id
            # broker-side tag filtering
            only_b = await drain(c, "E2E", 10, expression="B")
            assert sorted(m.body for ms in only_b.values() for m in ms) == \
                sorted(b"batch-%d" % i for i in range(10))
    run(main())


def test_sync_wrapper(dev):
    d = dev()
    with SyncProducer("sp", d.namesrv) as p:
        r = p.send(Message("SyncTopic", b"hello"))
        assert r.status is SendStatus.SEND_OK


def test_push_consumers_share_queues_and_rebalance(dev):
    d = dev()

    async def main():
        seen: dict[str, list[bytes]] = {"a": [], "b": []}

        def listener(name):
            async def on(msgs):
                seen[name].extend(m.body for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS
            return on

        async with Producer("p", d.namesrv) as p:
            await p.send(Message("Shared", b"warm-up"))  # creates the topic (4 queues)
            a = PushConsumer("g", d.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                             rebalance_interval=1, pull_suspend_ms=500)
            a.subscribe("Shared")
            a.register_listener(listener("a"))
            await a.start()
            b = PushConsumer("g", d.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                             rebalance_interval=1, pull_suspend_ms=500)
            b.subscribe("Shared")
            b.register_listener(listener("b"))
            await b.start()

            def shared(c):
                return [q for q in c.queues if q.topic == "Shared"]

            async def halves():  # both hold a share of the 4 queues
                await a.rebalance()
                return len(shared(a)) == 2 and len(shared(b)) == 2
            await until(halves, "each consumer holds two queues", interval=0.1)
            sent = [b"m-%d" % i for i in range(200)]
            for body in sent:
                await p.send(Message("Shared", body))
            await until(lambda: len(seen["a"]) + len(seen["b"]) >= 201, "all 201 consumed")
            # at-least-once: a queue changing hands may redeliver what was in flight, but
            # nothing is lost and every message sent after the handover arrives once
            assert set(seen["a"] + seen["b"]) == set(sent + [b"warm-up"])
            assert sorted(x for x in seen["a"] + seen["b"] if x != b"warm-up") == sorted(sent)
            assert seen["a"] and seen["b"]
            # b leaves: a takes all four queues and keeps consuming
            await b.shutdown()
            await until(lambda: len(shared(a)) == 4, "a holds all four queues")
            for i in range(40):
                await p.send(Message("Shared", b"after-%d" % i))
            await until(lambda: sum(x.startswith(b"after") for x in seen["a"]) >= 40,
                        "a consumed the 40 sent after")
            assert sorted(x for x in seen["a"] if x.startswith(b"after")) == \
                sorted(b"after-%d" % i for i in range(40))
            await a.shutdown()
    run(main(), 90)


def test_broadcasting_delivers_to_every_consumer(dev, tmp_path):
    d = dev()

    async def main():
        got = {0: [], 1: []}
        consumers = []
        async with Producer("p", d.namesrv) as p:
            await p.send(Message("Bcast", b"create"))
            for i in range(2):
                c = PushConsumer("bg", d.namesrv, message_model="BROADCASTING",
                                 pull_suspend_ms=500, offset_dir=tmp_path / f"off{i}")
                c.subscribe("Bcast")
                c.register_listener(lambda msgs, i=i: got[i].extend(m.body for m in msgs))
                await c.start()
                consumers.append(c)
            for j in range(30):
                await p.send(Message("Bcast", b"b-%d" % j))
            await until(lambda: len(got[0]) >= 30 and len(got[1]) >= 30,
                        "each consumer got the 30")
            for c in consumers:
                await c.shutdown()
        want = sorted(b"b-%d" % j for j in range(30))
        assert sorted(got[0]) == want and sorted(got[1]) == want
    run(main())


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_failed_messages_are_retried_then_dead_lettered(dev, flush):
    """Under SYNC_FLUSH the send-back is answered once its retry message is durable."""
    d = dev({"flushDiskType": flush})

    async def main():
        attempts: dict[bytes, int] = {}

        async def listener(msgs):
            for m in msgs:
                attempts[m.body] = attempts.get(m.body, 0) + 1
                if m.body.startswith(b"bad"):
                    return ConsumeStatus.RECONSUME_LATER
                if m.body == b"flaky" and attempts[m.body] < 2:
                    raise RuntimeError("first try fails")
            return ConsumeStatus.CONSUME_SUCCESS

        async with Producer("p", d.namesrv) as p:
            await p.send(Message("Retry", b"create"))
            c = PushConsumer("rg", d.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                             max_reconsume_times=2, pull_suspend_ms=300)
            c.subscribe("Retry")
            c.register_listener(listener)
            await c.start()
            await p.send(Message("Retry", b"flaky"))
            await p.send(Message("Retry", b"bad-1"))
            await until(lambda: attempts.get(b"bad-1", 0) >= 3 and
                        attempts.get(b"flaky", 0) >= 2, "the retries", 15)
            async with PullConsumer("dlq-reader", d.namesrv) as pc:
                got = await drain(pc, "%DLQ%rg", 1)  # bad-1 is done with once it is there
            await c.shutdown()
            assert attempts[b"flaky"] == 2  # retried once through %RETRY%rg, then done
            assert attempts[b"bad-1"] == 3  # first delivery + max_reconsume_times retries
            dead = [m for ms in got.values() for m in ms]
            assert [m.body for m in dead] == [b"bad-1"]
            assert dead[0].topic == "Retry"  # RETRY_TOPIC keeps the original topic
    run(main(), 90)


def test_long_polling_holds_a_pull_until_a_message_arrives(dev):
    d = dev()

    async def main():
        async with Producer("p", d.namesrv) as p, PullConsumer("lp", d.namesrv) as c:
            r = await p.send(Message("Long", b"first"))
            q = r.queue
            t0 = time.monotonic()
            empty = await c.pull(q, 1, suspend_ms=400)
            assert empty.status is PullStatus.NO_NEW_MSG
            assert 0.3 < time.monotonic() - t0 < 3  # it was held, then answered

            async def later():  # the message comes while the broker holds the pull
                async with Admin(d.namesrv) as a:
                    async def held():
                        return int((await a.broker_status(d.broker))["heldPulls"]) > 0
                    await until(held, "the broker holds the pull")
                await p.send(Message("Long", b"second"), queue=q)
            t0 = time.monotonic()
            sender = asyncio.create_task(later())
            got = await c.pull(q, 1, suspend_ms=10_000)
            await sender
            assert got.status is PullStatus.FOUND and got.messages[0].body == b"second"
            assert time.monotonic() - t0 < 5  # woken by the message, not the timeout
    run(main())


def test_offsets_survive_a_broker_restart(dev, tmp_path):
    d = dev(data=tmp_path / "node", namesrv_port=0, port=0)

    async def phase1():
        async with Producer("p", d.namesrv) as p, PullConsumer("og", d.namesrv) as c:
            r = await p.send(Message("Keep", b"x"))
            for _ in range(9):
                await p.send(Message("Keep", b"x"), queue=r.queue)
            await c.commit(r.queue, 7)
            return r.queue
    q = run(phase1())
    ns_port, b_port = d.ports
    assert d.stop() == 0  # a clean stop
    d2 = dev(data=tmp_path / "node", namesrv_port=ns_port, port=b_port)

    async def phase2():
        async with PullConsumer("og", d2.namesrv) as c:
            await c.fetch_queues("Keep")
            assert await c.query_offset(q) == 7
            r = await c.pull(q, 7)
            assert [m.queue_offset for m in r.messages] == [7, 8, 9]
    run(phase2())


def test_errors_are_clear(dev):
    d = dev({"autoCreateTopicEnable": "false", "maxMessageSize": "1024"})

    async def main():
        async with Producer("p", d.namesrv, retry_times=0) as p:
            with pytest.raises(MQClientError, match="TOPIC_NOT_EXIST"):
                await p.send(Message("NoSuchTopic", b"x"))
    run(main())


def test_compressed_bodies_from_java_clients_are_inflated(dev):
    """Java clients zlib-compress bodies over 4 KiB and set SYSFLAG_COMPRESSED."""
    import zlib
    from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode
    d = dev()
    big = b"compress me " * 1000

    async def main():
        client = RemotingClient()
        try:
            r = await client.invoke(d.broker, RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext={
                "a": "java", "b": "Zipped", "e": "0", "f": "1",
                "i": "TAGS\x01z\x02"}, body=zlib.compress(big)))
            assert r.code == 0
        finally:
            await client.close()
        async with PullConsumer("zc", d.namesrv) as c:
            q = [q for q in await c.fetch_queues("Zipped") if q.queue_id == 0][0]
            got = await c.pull(q, 0)
            assert got.messages[0].body == big and got.messages[0].tags == "z"
    run(main())


def test_pipelined_sends_travel_in_batches_and_are_answered_one_by_one(dev):
    """send_async calls of one event-loop turn are coalesced into batch requests; each
    caller still gets its own result, and a message the broker refuses fails alone."""
    d = dev({"maxMessageSize": "2048"})

    async def main():
        async with Producer("p", d.namesrv) as p, PullConsumer("c", d.namesrv) as c:
            await p.send(Message("Coalesced", b"warm-up"))
            futs = [p.send_async(Message("Coalesced", b"m-%03d" % i, tags="T", keys=f"k{i}"))
                    for i in range(300)]
            results = await asyncio.gather(*futs)
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert len({r.msg_id for r in results}) == 300
            # coalesced: the turn's 300 messages landed as two batches, not round-robin
            assert len({r.queue.queue_id for r in results}) <= 2
            futs = [p.send_async(Message("Coalesced", b"m-%03d" % i)) for i in range(300, 310)]
            futs.insert(5, p.send_async(Message("Coalesced", b"x" * 4000)))  # too large
            more = await asyncio.gather(*futs, return_exceptions=True)
            bad = more.pop(5)
            assert isinstance(bad, MQClientError) and bad.code == ResponseCode.MESSAGE_ILLEGAL
            assert all(r.status is SendStatus.SEND_OK for r in more)
            results += more
            got = await drain(c, "Coalesced", 311)
            stored = {(q, m.queue_offset): m for q, ms in got.items() for m in ms}
            assert len(stored) == 311  # the warm-up and the 310 good ones, nothing else
            for i, r in enumerate(results):
                m = stored[(r.queue.queue_id, r.queue_offset)]
                assert (m.body, m.msg_id) == (b"m-%03d" % i, r.msg_id)
                assert i >= 300 or (m.tags, m.keys) == ("T", [f"k{i}"])
    run(main())


def test_producer_without_coalescing_sends_one_request_per_message(dev):
    d = dev()

    async def main():
        async with Producer("p", d.namesrv, coalesce=False) as p:
            await p.send(Message("Single", b"warm-up"))
            results = await asyncio.gather(*(p.send_async(Message("Single", b"%d" % i))
                                             for i in range(8)))
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert len({r.queue.queue_id for r in results}) == 4  # round-robin, one by one
    run(main())
