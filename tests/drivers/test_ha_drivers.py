"""The HA drivers over real sockets between two real stores: a new slave copies only the
master's last segment (messages of several sizes, split anywhere by small chunks, across
segment ends), dispatches its own queues, and a slave whose log has a tail the master does
not is refused."""
import asyncio

from ledgermq.drivers.ha import HAMasterDriver, HASlaveDriver
from ledgermq.replication.ha import Close, HAConfig
from ledgermq.store import MessageStore
from ledgermq.wire.message import Message

from ..store.conftest import small_config
from ..wait import until

SEG = 64 * 1024


def open_store(path) -> MessageStore:
    s = MessageStore(small_config(path))
    s.open()
    return s


def fill(store: MessageStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        store.put_message(Message(topic="HA", body=bytes([65 + i % 26]) * (50 + 37 * (i % 40)),
                                  queue_id=i % 2))


def test_new_slave_copies_the_last_segment_then_follows(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 400)  # about 5 segments
    assert master.commitlog.max_offset > 3 * SEG
    config = HAConfig(segment_size=SEG, transfer_batch=1000, window=20_000, heartbeat_ms=100)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0)
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m))
        await s.start()
        try:
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the slave holds the master's log")
            first = slave.commitlog.min_offset
            assert first == master.commitlog.max_offset - master.commitlog.max_offset % SEG
            fill(master, 150, start=400)  # crosses at least one more segment end
            m.appended()
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the slave follows")
            for qid in (0, 1):
                lo, hi = slave.min_offset_in_queue("HA", qid), slave.max_offset_in_queue("HA", qid)
                assert hi == master.max_offset_in_queue("HA", qid) and 0 < lo < hi
                got = slave.get_messages("HA", qid, lo, hi - lo)
                want = master.get_messages("HA", qid, lo, hi - lo)
                assert [bytes(x) for x in got.messages()] == [bytes(x) for x in want.messages()]
        finally:
            await s.stop()
            await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()


async def _addr(m):
    return f"127.0.0.1:{m.port}"


def test_a_slave_with_a_foreign_tail_is_refused(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 10)
    fill(slave, 30)  # longer than the master's log: not a copy of it
    config = HAConfig(segment_size=SEG, heartbeat_ms=100)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0)
        closed = []

        def execute(actions, real=m.execute):  # notes the links the master closes
            closed.extend(a for a in actions if isinstance(a, Close))
            real(actions)
        m.execute = execute
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m))
        await s.start()
        await until(lambda: closed and not m.status()["slaves"], "the slave's link closed")
        assert "holds data the master does not" in closed[0].reason
        assert m.status()["slaves"] == []  # dropped, never fed
        assert slave.commitlog.max_offset > master.commitlog.max_offset
        await s.stop()
        await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()
