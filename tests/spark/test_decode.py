"""The numpy decoder of pulled bodies gives exactly what the per-message decoder gives:
bodies of every length (empty too), messages with and without tags, keys and extra
properties, a property whose name ends like another's and a value that reads like a key."""
import asyncio

from ledgermq import Message, Producer
from ledgermq.client.message import decode_pulled
from ledgermq.spark.arrow import raw_to_record_batch, to_record_batch
from ledgermq.spark.queues import pull_range


def test_numpy_decoder_matches_the_message_decoder(broker):
    topic = "DecodeMe"

    async def fill():
        async with Producer("decode", broker.namesrv) as p:
            msgs = [Message(topic, b"y" * (j % 300), tags="t%d" % j if j % 2 else None,
                            keys=f"k{j}" if j % 3 else None,
                            properties={"XTAGS": "fake", "a": "UNIQ_KEY"} if j % 5 == 0
                            else {})
                    for j in range(700)]
            r = await p.send_batch(msgs[:350])
            await p.send_batch(msgs[350:], r.queue)
            return r.queue
    mq = asyncio.run(fill())
    seen = 0
    for raw in pull_range(broker.namesrv, mq, 0, 650, 256):
        for props in (True, False):
            fast = raw_to_record_batch(topic, "broker-a", mq.queue_id, raw, 650, props, mq)
            slow = to_record_batch(topic, "broker-a", mq.queue_id,
                                   [m for m in decode_pulled(raw, mq) if m.queue_offset < 650],
                                   props)
            assert fast.equals(slow)
        seen += fast.num_rows
    assert seen == 650


def test_fixed_size_and_near_uniform_messages_decode_the_same(broker):
    """The decoder's shortcuts: messages all of one size (found without a walk) and
    bodies of about one length (copied as window rows)."""
    cases = {"Uniform": [b"u" * 64] * 300,
             "NearUniform": [bytes([65 + j % 26]) * (100 + j % 21) for j in range(300)]}

    async def fill(topic, bodies):
        async with Producer("decode-" + topic, broker.namesrv) as p:
            r = await p.send_batch([Message(topic, b, properties={"UNIQ_KEY": f"id{j:06d}"})
                                    for j, b in enumerate(bodies)])
            return r.queue
    for topic, bodies in cases.items():
        mq = asyncio.run(fill(topic, bodies))
        got = []
        for raw in pull_range(broker.namesrv, mq, 0, 300, 128):
            fast = raw_to_record_batch(topic, "broker-a", mq.queue_id, raw, 300, False, mq)
            slow = to_record_batch(topic, "broker-a", mq.queue_id,
                                   [m for m in decode_pulled(raw, mq) if m.queue_offset < 300],
                                   False)
            assert fast.equals(slow)
            got += fast.column("body").to_pylist()
        assert got == bodies
