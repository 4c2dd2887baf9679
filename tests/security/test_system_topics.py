"""A hostile client's raw SEND frames against a real `ledgermq dev` (#31): no client may
write into a system topic (RocketMQ's not-allowed-send set and the rmq_sys_ prefix), and
the properties only the broker sets (where a parked message really goes, when a timer is
due, how often a transaction was checked) never come from a client."""
import asyncio

import pytest

from ledgermq import PullConsumer, PullStatus
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.wire.message import encode_properties

SYSTEM_TOPICS = ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                 "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer", "rmq_sys_POP_ACK",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "rmq_sys_anything"]


def send_frame(topic: str, props: dict, queue_id: int = 0) -> RemotingCommand:
    return RemotingCommand(RequestCode.SEND_MESSAGE, ext={
        "producerGroup": "hostile", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
        "bornTimestamp": "0", "flag": "0", "properties": encode_properties(props).decode(),
        "reconsumeTimes": "0"}, body=b"payload")


async def ask(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, cmd, 5)
    finally:
        await client.close()


@pytest.mark.parametrize("topic", SYSTEM_TOPICS)
def test_a_client_cannot_send_into_a_system_topic(dev_once, topic):
    forged = {"REAL_TOPIC": "Victim", "REAL_QID": "1000000", "DELAY": "1"}
    r = asyncio.run(ask(dev_once.broker, send_frame(topic, forged)))
    assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
    assert f"Sending message to topic[{topic}] is forbidden" in r.remark


def test_properties_only_the_broker_sets_are_stripped_from_a_client_send(dev_once):
    forged = {"REAL_TOPIC": "Victim", "REAL_QID": "1000000", "TIMER_OUT_MS": "1",
              "TRANSACTION_CHECK_TIMES": "99", "KEYS": "mine", "color": "red"}
    r = asyncio.run(ask(dev_once.broker, send_frame("Plain", forged)))
    assert r.code == ResponseCode.SUCCESS, r.remark
    qid = int(r.ext["queueId"])

    async def read():
        async with PullConsumer("reader", dev_once.namesrv) as c:
            q = next(q for q in await c.fetch_queues("Plain") if q.queue_id == qid)
            got = await c.pull(q, int(r.ext["queueOffset"]), 1)
            assert got.status is PullStatus.FOUND
            return got.messages[0].properties
    props = asyncio.run(read())
    assert props["KEYS"] == "mine" and props["color"] == "red"  # the client's own stay
    for key in ("REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TRANSACTION_CHECK_TIMES"):
        assert key not in props, props


@pytest.mark.parametrize("props, why", [
    ({}, "no REAL_TOPIC"),
    ({"REAL_TOPIC": "bad topic!", "REAL_QID": "0"}, "not a topic"),
    ({"REAL_TOPIC": "T", "REAL_QID": "1000000"}, "not a queue id"),
    ({"REAL_TOPIC": "T", "REAL_QID": "-1"}, "not a queue id"),
    ({"REAL_TOPIC": "T", "REAL_QID": "x" * 100}, "not a queue id"),
])
def test_a_parked_messages_destination_is_checked_before_use(props, why):
    """What the broker reads back from its own system topics (a value written before
    clients were kept out, or damaged) is checked: a bad one is said, not used."""
    from ledgermq.broker.delivery.parked import BadParked, parked_destination
    with pytest.raises(BadParked, match=why):
        parked_destination(props)
    assert parked_destination({"REAL_TOPIC": "T", "REAL_QID": "3"}) == ("T", 3)


def test_properties_ending_in_a_zero_byte_are_refused(dev_once):
    """Recovery reads a message ending in a zero byte as a torn write and cuts the log
    there: a client must not be able to store one (and so cut what follows it)."""
    cmd = send_frame("Plain", {})
    cmd.ext["properties"] = "odd\x00"  # (no name=value pair: stored as it came)
    r = asyncio.run(ask(dev_once.broker, cmd))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "zero byte" in r.remark, r.remark


@pytest.mark.parametrize("where", ["one message", "the batch's header"])
def test_properties_only_the_broker_sets_are_stripped_from_a_batch(dev_once, where):
    """As for one message, in a batch: whether the forged properties ride on one of its
    messages or on the header's properties, which the broker adds to every message."""
    from ledgermq.wire.batch_body import encode_batch_body
    forged = encode_properties({"REAL_TOPIC": "Victim", "REAL_QID": "1000000",
                                "TIMER_OUT_MS": "1", "TRANSACTION_CHECK_TIMES": "99"})
    plain = [encode_properties({"color": f"c{i}"}) for i in range(5)]
    props = [p + forged if where == "one message" and i == 2 else p
             for i, p in enumerate(plain)]
    cmd = send_frame("PlainBatch", {})
    cmd.code = RequestCode.SEND_BATCH_MESSAGE
    cmd.ext["properties"] = forged.decode() if where == "the batch's header" else ""
    cmd.body = encode_batch_body([b"m%d" % i for i in range(5)], props, [0] * 5)
    r = asyncio.run(ask(dev_once.broker, cmd))
    assert r.code == ResponseCode.SUCCESS, r.remark
    qid, first = int(r.ext["queueId"]), int(r.ext["queueOffset"])

    async def read():
        async with PullConsumer("reader", dev_once.namesrv) as c:
            q = next(q for q in await c.fetch_queues("PlainBatch") if q.queue_id == qid)
            got = await c.pull(q, first, 5)
            assert got.status is PullStatus.FOUND
            return [m.properties for m in got.messages]
    stored = asyncio.run(read())
    assert [p["color"] for p in stored] == [f"c{i}" for i in range(5)]  # theirs stay
    for p in stored:
        for key in ("REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TRANSACTION_CHECK_TIMES"):
            assert key not in p, p
