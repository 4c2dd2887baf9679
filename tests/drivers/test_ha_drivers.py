"""The HA drivers over real sockets between two real stores: a new slave copies only the
master's last segment (messages of several sizes, split anywhere by small chunks, across
segment ends), dispatches its own queues, and a slave whose log has a tail the master does
not is refused."""
import asyncio
import dataclasses
from contextlib import asynccontextmanager

from ledgermq.drivers.ha import HAMasterDriver, HASlaveDriver
from ledgermq.replication.ha import CHECKPOINT_REPORT, Close, HAConfig, SyncStatus
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


CONFIG = HAConfig(segment_size=SEG, transfer_batch=1000, window=20_000, heartbeat_ms=100)


@asynccontextmanager
async def master_and_slave(master: MessageStore, slave: MessageStore, config=CONFIG):
    """A master driver on `master` and a slave driver on `slave` following it, stopped
    on the way out."""
    m = HAMasterDriver(master, config, "127.0.0.1", 0)
    await m.start()
    s = HASlaveDriver(slave, config, lambda: _addr(m))
    await s.start()
    try:
        yield m, s
    finally:
        await s.stop()
        await m.stop()


def test_new_slave_copies_the_last_segment_then_follows(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 400)  # about 5 segments
    assert master.commitlog.max_offset > 3 * SEG

    async def scenario():
        async with master_and_slave(master, slave) as (m, s):
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


def test_checkpoint_mode_counts_only_flushed_copies_under_async_flush(tmp_path):
    """Checkpoint mode (S3) with flushDiskType=ASYNC_FLUSH and a periodic flush that never
    comes in the test: every report a slave sends names only bytes it has flushed, the
    master's sync for a write completes only once the master flushed it too, and flushes
    are group commits (far fewer than the messages)."""
    never = 600_000  # flushIntervalCommitLog: only the group commit can flush
    master = MessageStore(small_config(tmp_path / "m", flushIntervalCommitLog=never))
    slave = MessageStore(small_config(tmp_path / "s", flushIntervalCommitLog=never))
    master.open()
    slave.open()
    config = HAConfig(segment_size=SEG, heartbeat_ms=50, checkpoint=True)
    reports = []  # (reported offset, the slave's flushed offset as it was sent)
    acks = []  # (end of the write, the master's flushed offset as its sync completed)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0)
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m), slave_id=1)

        def write(data, real=s.write):
            reports.append((CHECKPOINT_REPORT.unpack(data)[0], slave.commitlog.flushed_offset))
            real(data)
        s.write = write
        await s.start()
        try:
            await until(lambda: m.core.members, "the slave joined the checkpoint")
            waits = []
            for burst in range(20):
                for i in range(10):
                    r = master.append(master.encode("HA", 0, [b"m%d-%d" % (burst, i) * 20]))
                    m.appended()
                    fut = m.sync(r.end_offset)
                    fut.add_done_callback(lambda f, end=r.end_offset: acks.append(
                        (end, master.commitlog.flushed_offset, f.result())))
                    waits.append(fut)
                await asyncio.sleep(0)  # the next burst comes a loop turn later
            await asyncio.wait_for(asyncio.gather(*waits), 10)
        finally:
            await s.stop()
            await m.stop()
    asyncio.run(scenario())
    assert [a for a in acks if a[2] is not SyncStatus.OK] == []
    assert len(acks) == 200
    early = [(off, flushed) for off, flushed in reports if off > flushed]
    assert early == [], f"the slave reported offsets it had not flushed: {early[:5]}"
    assert max(off for off, _ in reports) == master.commitlog.max_offset
    unflushed = [(end, flushed) for end, flushed, _ in acks if flushed < end]
    assert unflushed == [], f"writes acknowledged before the master flushed: {unflushed[:5]}"
    # group commit: one flush covers many messages, on both sides
    assert 0 < master.flush_rounds < 100 and 0 < slave.flush_rounds < 100, \
        (master.flush_rounds, slave.flush_rounds)
    master.close()
    slave.close()


def test_checkpoint_master_refuses_a_slave_that_follows_another_epoch(tmp_path):
    """S3 (sim seed 139): a slave cut off in an earlier epoch reconnects to its master's
    address, where the same broker now leads a later epoch whose log past a takeover is not
    the slave's. Its report must not count as an ack (that would put its foreign tail in
    the checkpoint, and append the master's bytes after it): the master closes the link,
    again at every retry, and the slave's log stays as it was for the control node's
    truncation."""
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 30)
    fill(slave, 10)  # shorter, and not the master's bytes: another lineage
    master.commitlog.flush()  # (both on disk, as after a restart)
    slave.commitlog.flush()
    slave_end = slave.commitlog.max_offset
    config = HAConfig(segment_size=SEG, heartbeat_ms=50, checkpoint=True)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0, members={1: 0}, epoch=3)
        closed = []

        def execute(actions, real=m.execute):  # notes the links the master closes
            closed.extend(a for a in actions if isinstance(a, Close))
            real(actions)
        m.execute = execute
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m), slave_id=1, epoch=1)
        await s.start()
        try:
            await until(lambda: closed or m.core.checkpoint, "the slave's report was taken")
            assert m.core.checkpoint == 0 and m.core.members == {1: 0}, "counted as an ack"
            assert "epoch 1" in closed[0].reason and "epoch 3" in closed[0].reason
            await until(lambda: len(closed) >= 2, "the slave's next attempt refused too")
            assert m.core.checkpoint == 0 and m.core.saved == 0 and m.core.members == {1: 0}
            assert slave.commitlog.max_offset == slave_end  # fed nothing
        finally:
            await s.stop()
            await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()


def test_a_slave_whose_log_forked_is_refused_then_copies_the_master_again(tmp_path):
    """The slave copied the master, then (away) took other bytes than the master took at
    the same offsets: a master that lost its tail and wrote anew. Its end is within the
    master's log, so offsets alone look fine; the tail digest of its first report does
    not match, and the master refuses it instead of appending after the fork. The slave
    drops its log and copies the master's again, from its last segment."""
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    config = HAConfig(segment_size=SEG, heartbeat_ms=100)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0)
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m))
        await s.start()
        fill(master, 10)
        m.appended()
        await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                    "the slave holds the master's log")
        await s.stop()
        fill(slave, 5, start=100)  # the fork: its bytes past the common prefix are its own
        fill(master, 20, start=200)
        m.appended()
        forked_end = slave.commitlog.max_offset
        assert forked_end < master.commitlog.max_offset
        closed = []

        def execute(actions, real=m.execute):
            closed.extend(a for a in actions if isinstance(a, Close))
            real(actions)
        m.execute = execute
        s = HASlaveDriver(slave, config, lambda: _addr(m))
        await s.start()
        await until(lambda: closed, "the master refused the forked slave")
        assert "forks from ours" in closed[0].reason
        end = master.commitlog.max_offset
        await until(lambda: slave.commitlog.max_offset == end, "the slave copied the master "
                    "again")
        start = slave.commitlog.min_offset
        assert start == end - end % SEG  # as a new slave: from the last segment
        assert bytes(slave.commitlog.read(start, end - start)) == \
            bytes(master.commitlog.read(start, end - start))
        assert len(closed) == 1 and 0 < forked_end < end
        await s.stop()
        await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()


def test_a_push_leaves_as_one_write(tmp_path):
    """Its header and its log bytes in one writev: written apart, the header went out as a
    segment of its own, and the slave woke for 12 bytes, then again for the rest."""
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 3)
    quiet = dataclasses.replace(CONFIG, heartbeat_ms=60_000)  # no heartbeat in between

    async def scenario():
        async with master_and_slave(master, slave, quiet) as (m, s):
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the slave holds the master's log")
            (w,) = m.writers.values()
            calls: list[str] = []
            transport = w.transport
            write, writelines = transport.write, transport.writelines

            class Counting:  # the transport, counting what it is asked to send
                def __getattr__(self, name):
                    return getattr(transport, name)

                def write(self, data):
                    calls.append("write")
                    write(data)

                def writelines(self, parts):
                    calls.append("writelines")
                    writelines(parts)
            w._transport = Counting()
            fill(master, 1, start=3)
            m.appended()
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the slave has the new message")
            w._transport = transport
            assert len(calls) == 1, calls
    asyncio.run(scenario())
    master.close()
    slave.close()
