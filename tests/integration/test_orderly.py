"""Orderly consumption with ledgermq's own client: per sharding key, messages are consumed
in the order they were sent, also across a failed attempt (retried in place, never
overtaken) and across a second consumer joining the group (queues change hands under the
broker's locks)."""
import asyncio

from ledgermq import ConsumeStatus, Message, Producer, PushConsumer
from tests.wait import until

KEYS, STEPS = 6, 30


def test_orderly_per_key_across_a_retry_and_a_rebalance(dev):
    d = dev()

    async def main():
        seen: dict[str, list[int]] = {f"order-{k}": [] for k in range(KEYS)}
        failed_once = set()

        def listener(msgs):
            for m in msgs:
                key, step = m.keys[0], int(m.body)
                if key == "order-2" and step == 5 and key not in failed_once:
                    failed_once.add(key)  # the first attempt fails: retried in place
                    return ConsumeStatus.RECONSUME_LATER
                seen[key].append(step)
            return ConsumeStatus.CONSUME_SUCCESS

        async with Producer("po", d.namesrv) as p:
            await p.send(Message("Orders", b"0", keys="warm-up"))  # creates 4 queues
            seen["warm-up"] = []
            consumers = []
            for _ in range(2):
                c = PushConsumer("orderly", d.namesrv, orderly=True, rebalance_interval=1,
                                 consume_from="CONSUME_FROM_FIRST_OFFSET", pull_suspend_ms=300)
                c.subscribe("Orders")
                c.register_listener(listener)
                await c.start()
                consumers.append(c)
                for step in range(STEPS // 2 * len(consumers) - STEPS // 2,
                                  STEPS // 2 * len(consumers)):
                    for k in range(KEYS):
                        await p.send_orderly(Message("Orders", str(step).encode(),
                                                     keys=f"order-{k}"), f"order-{k}")
            await until(lambda: all(len(set(seen[f"order-{k}"])) == STEPS
                                    for k in range(KEYS)),
                        lambda: f"every step of every key: {seen}, "
                        f"queues {[sorted(q.queue_id for q in c.queues) for c in consumers]}", 30)
            for c in consumers:
                await c.shutdown()
        for k in range(KEYS):
            steps = seen[f"order-{k}"]
            # in order; a queue changing hands may replay a suffix, never reorder it
            first = [s for i, s in enumerate(steps) if s not in steps[:i]]
            assert first == list(range(STEPS)), (k, steps)
        assert failed_once == {"order-2"}

    asyncio.run(asyncio.wait_for(main(), 90))
