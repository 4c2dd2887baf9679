"""Acks written in groups (broker/pop/ack_log.py): the acks of one turn of the event loop
share one log write, each asker is answered by that write's outcome, and nothing is
answered before it."""
import asyncio

import pytest

from ledgermq.broker.pop.ack_log import AckLog


async def writes_out(writes, n):
    """Until `n` writes have started (each a task of its own), within a few loop turns."""
    for _ in range(20):
        if len(writes) >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(writes)} writes started, not {n}")


def test_acks_of_one_turn_share_a_write_and_its_outcome():
    writes, gate = [], None

    async def write(acks):
        writes.append(list(acks))
        second = len(writes) == 2
        await gate.wait()
        return "not safe" if second else None

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        log = AckLog(write)
        first = [log.log([(("g", "T", 0), i)]) for i in range(5)]  # one turn
        await writes_out(writes, 1)
        later = log.log([(("g", "T", 1), 9)])  # after the first write went out
        await writes_out(writes, 2)
        assert writes == [[(("g", "T", 0), i) for i in range(5)], [(("g", "T", 1), 9)]]
        assert not any(f.done() for f in first + [later])  # the writes are not acknowledged
        gate.set()
        assert await asyncio.gather(*first) == [None] * 5
        assert await later == "not safe"
    asyncio.run(main())


def test_a_failed_write_fails_its_askers_and_one_gone_does_not_matter():
    async def write(acks):
        await asyncio.sleep(0)
        raise OSError("disk")

    async def main():
        log = AckLog(write)
        a, b = log.log([(("g", "T", 0), 1)]), log.log([(("g", "T", 0), 2)])
        a.cancel()  # its asker gave up
        with pytest.raises(OSError):
            await b
    asyncio.run(main())


def test_a_write_said_at_once_answers_in_the_next_turn_and_its_error_fails_them():
    """A mode that holds a write at once (a single node) answers the acks of one turn
    in the turn after, with no task between; a write that fails at once fails them."""
    writes = []

    def write(acks):
        writes.append(list(acks))
        if len(writes) == 2:
            raise OSError("disk full")
        return None

    async def main():
        log = AckLog(write)
        first = [log.log([(("g", "T", 0), i)]) for i in range(3)]
        await asyncio.sleep(0)
        assert [f.result() for f in first] == [None] * 3 and len(writes) == 1
        second = log.log([(("g", "T", 0), 9)])
        await asyncio.sleep(0)
        with pytest.raises(OSError, match="disk full"):
            second.result()
    asyncio.run(main())


def test_a_pop_service_logs_the_acks_of_one_turn_in_one_record(tmp_path):
    """On a real broker's POP service: ten acks asked for together are one record of the
    ack log (one append), not ten."""
    from ledgermq.broker import Broker
    from ledgermq.broker.access.system_topics import POP_ACK_TOPIC
    from ledgermq.broker.config import load_broker_config
    from ledgermq.broker.meta.topic_table import TopicConfig
    from ledgermq.broker.pop.service import parse_ack_record
    from ledgermq.store import GetStatus
    from ledgermq.wire.message import decode_message

    async def main():
        bcfg, scfg, _ = load_broker_config(None, {
            "storePathRootDir": str(tmp_path / "store"), "listenPort": "0",
            "mappedFileSizeCommitLog": str(1 << 20)})
        b = Broker(bcfg, scfg, standalone=True)
        b.store.open()
        try:
            b.topics.create(TopicConfig("Acked", 1, 1))
            b.store.append(b.store.encode("Acked", 0, [b"m%d" % i for i in range(10)]))
            popped = b.pop.pop("acker", "Acked", 10, 60_000, False, None, None)
            assert len(popped) == 10
            acks = [b.pop.ack("acker", p.handle.encode(), "Acked") for p in popped]
            assert await asyncio.gather(*(b.pop.log_acks([a]) for a in acks)) == [None] * 10
            got = b.store.get_messages(POP_ACK_TOPIC, 0, 0, 32, 1 << 20, None)
            assert got.status == GetStatus.FOUND
            records = [parse_ack_record(decode_message(m).body) for m in got.messages()]
            assert records == [(("acker", "Acked", 0), list(range(10)))]
        finally:
            b.store.close()
    asyncio.run(main())
