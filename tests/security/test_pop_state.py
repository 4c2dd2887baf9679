"""POP state a hostile RocketMQ 5 client could grow (#31), on a real broker's PopService
and store (not started: the calls its gRPC endpoint makes, made directly): extending one
delivery's invisible time in a loop, and receiving as ever new groups."""
import asyncio

import pytest

from ledgermq.broker import Broker
from ledgermq.broker.config import load_broker_config
from ledgermq.broker.pop.service import COMPACT_AT_LEAST
from ledgermq.broker.meta.topic_table import TopicConfig


@pytest.fixture
def broker(tmp_path):
    async def make():
        bcfg, scfg, unknown = load_broker_config(None, {
            "storePathRootDir": str(tmp_path / "store"), "listenPort": "0",
            "mappedFileSizeCommitLog": str(1 << 20), "brokerRole": "ASYNC_MASTER"})
        assert not unknown
        b = Broker(bcfg, scfg, standalone=True)
        b.store.open()
        b.topics.create(TopicConfig("Work", 1, 1))
        b.topics.create(TopicConfig("Empty", 1, 1))
        for i in range(10):
            b.store.append(b.store.encode("Work", 0, [b"m%d" % i]))
        return b
    b = asyncio.run(make())
    yield b
    b.store.close()


def test_extending_a_delivery_in_a_loop_does_not_grow_the_deadlines(broker):
    pop = broker.pop
    got = pop.pop("g", "Work", 1, 60_000, False, None, None)
    handle = got[0].handle.encode()
    for _ in range(5 * COMPACT_AT_LEAST):
        handle = pop.change_invisible("g", handle, 60_000, "Work").encode()
    assert len(pop.deadlines) <= 2 * COMPACT_AT_LEAST, len(pop.deadlines)
    pop.ack("g", handle, "Work")  # the live entry survived every sweep


def test_receives_as_new_groups_leave_no_state_behind(broker):
    """Receives for 2,000 invented groups of a topic with nothing in it, and one group
    with a message out: pruning keeps the one delivery and forgets the rest."""
    pop = broker.pop
    for i in range(2000):
        assert pop.pop(f"invented-{i}", "Empty", 1, 60_000, False, None, None) == []
    out = pop.pop("real", "Work", 1, 60_000, False, None, None)
    assert len(pop.queues) >= 2001
    pop.prune()
    assert list(pop.queues) == [("real", "Work", 0)]
    pop.ack("real", out[0].handle.encode(), "Work")
