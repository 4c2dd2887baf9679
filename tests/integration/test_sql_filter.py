"""SQL92 subscriptions on a real broker: a push consumer gets exactly the messages its
expression selects, and a queue holding only messages it does not select does not hold it
back (its offset reaches the queue's end); a bad expression or a broker without
enablePropertyFilter is refused with a reason."""
import asyncio

import pytest

from ledgermq import (
    ConsumeStatus, Message, MessageSelector, MQClientError, Producer, PullConsumer, PullStatus,
    PushConsumer,
)
from ledgermq.remoting import ResponseCode

from ..wait import until

SQL = "n >= 10 AND color = 'red'"


def test_a_push_consumer_gets_exactly_what_its_sql_selects(dev):
    d = dev({"enablePropertyFilter": "true"})

    async def main():
        async with Producer("sql-p", d.namesrv) as p:
            queues = await p.queues("Paint")
            only_other = queues[0]  # every message here fails the filter
            for i in range(60):
                await p.send(Message("Paint", b"skip-%d" % i, properties={"n": "1"}),
                             only_other)
            want = set()
            for i in range(40):
                color = "red" if i % 2 else "blue"
                body = b"m-%d-%s" % (i, color.encode())
                await p.send(Message("Paint", body, properties={"n": str(i), "color": color}),
                             queues[1 + i % (len(queues) - 1)])
                if i >= 10 and color == "red":
                    want.add(body)
        got: list[bytes] = []
        c = PushConsumer("sql-g", d.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("Paint", MessageSelector.by_sql(SQL))
        c.register_listener(lambda msgs: got.extend(m.body for m in msgs)
                            or ConsumeStatus.CONSUME_SUCCESS)
        await c.start()
        try:
            await until(lambda: set(got) == want, "exactly the selected messages", timeout=15)
            state = c.queues[only_other]
            await until(lambda: state.next_offset == 60, "past the queue of others", timeout=10)
            assert sorted(got) == sorted(want)  # each once
        finally:
            await c.shutdown()
    asyncio.run(main())


def test_a_pull_that_selects_nothing_moves_past_what_it_looked_at(dev):
    d = dev()

    async def main():
        async with Producer("sql-p2", d.namesrv) as p:
            q = (await p.queues("Few"))[0]
            for _ in range(25):
                await p.send(Message("Few", b"no", properties={"n": "0"}), q)
        async with PullConsumer("sql-pull", d.namesrv) as c:
            r = await c.pull(q, 0, 32, MessageSelector.by_sql("n > 0"))
            assert r.status is PullStatus.NO_MATCHED_MSG and r.next_begin_offset == 25
    asyncio.run(main())


def test_bad_expressions_and_a_broker_without_the_filter_are_refused_with_reasons(dev):
    off, on = dev({"enablePropertyFilter": "false"}), dev()  # dev's default: on

    async def refusal(ns: str, group: str, expression: str) -> str:
        async with Producer(group + "-p", ns) as p:
            await p.send(Message("Filtered", b"x"))
        c = PushConsumer(group, ns)
        c.subscribe("Filtered", MessageSelector.by_sql(expression))
        c.register_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
        try:
            with pytest.raises(MQClientError) as e:
                await c.start()
        finally:
            await c.shutdown()
        assert e.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        return str(e.value)

    async def main():
        assert "enablePropertyFilter=true" in await refusal(off.namesrv, "sql-off", "a = 1")
        why = await refusal(on.namesrv, "sql-bad", "a >")
        assert "at position 4" in why and "end of the expression" in why
    asyncio.run(main())
