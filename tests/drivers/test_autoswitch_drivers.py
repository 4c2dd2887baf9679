"""Controller mode's HA drivers over real sockets between real stores: a slave whose log
went on in an epoch the master never had is cut back where the histories part, then
copies the master's log byte for byte (epochs recorded, consumers held at the confirm
offset); a send waits for the SyncStateSet; a crash between cutting the log and the epoch
file leaves no epoch vouching for bytes that are gone."""
import asyncio

from ledgermq.runtime.clock import mono_ms
from ledgermq.drivers.autoswitch import AutoSwitchMasterDriver, AutoSwitchSlaveDriver, load_epochs
from ledgermq.replication.autoswitch.sync_state import SyncConfig, SyncStateTracker
from ledgermq.replication.ha import HAConfig, SyncStatus
from ledgermq.store import MessageStore
from ledgermq.store.marks.epoch_file import EpochFile

from ..store.conftest import small_config
from ..wait import until
from .test_ha_drivers import _addr, fill, SEG


def open_store(path) -> MessageStore:
    """As a controller-mode broker opens it: consumers see what replication confirmed."""
    s = MessageStore(small_config(path), dispatch_follows_log=False)
    s.open(0)
    return s


def span(store, start, end) -> bytes:
    """Commit-log bytes [start, end) across segment ends."""
    out = []
    while start < end:
        seg = store.commitlog.files.find(start)
        stop = min(end, seg.end)
        out.append(bytes(seg.view[start - seg.start:stop - seg.start]))
        start = stop
    return b"".join(out)


def test_diverged_slave_is_cut_where_epochs_part_then_follows(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 60)
    shared = master.commitlog.max_offset
    slave.append_raw(0, master.commitlog.read(0, shared))  # the same epoch-1 history...
    assert slave.commitlog.max_offset == shared
    fill(slave, 25, start=100)  # ...then went on as master of epoch 2 alone
    fill(master, 40, start=200)  # while the master wrote epoch 3
    m_epochs, s_epochs = load_epochs(master), load_epochs(slave)
    m_epochs.append(1, 0)
    m_epochs.append(3, shared)
    s_epochs.append(1, 0)
    s_epochs.append(2, shared)
    config = HAConfig(segment_size=SEG, transfer_batch=700, heartbeat_ms=50)

    async def scenario():
        tracker = SyncStateTracker(1, (1, 2), 1, master.commitlog.max_offset, mono_ms(),
                                   SyncConfig(all_ack=True))
        proposals = []
        m = AutoSwitchMasterDriver(master, config, "127.0.0.1", 0, m_epochs, tracker,
                                   proposals.append)
        await m.start()
        s = AutoSwitchSlaveDriver(slave, config, s_epochs, lambda: _addr(m), slave_id=2)
        await s.start()
        try:
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the slave holds the master's log")
            end = master.commitlog.max_offset
            assert span(slave, 0, end) == span(master, 0, end)
            assert s_epochs.entries == [(1, 0), (3, shared)]  # epoch 2 is gone with its bytes
            await until(lambda: slave.dispatch_bound == end,
                        "the slave's consumers see it all")  # confirmed by the whole set
            fill(master, 5, start=300)
            m.appended()
            assert await asyncio.wait_for(m.sync(master.commitlog.max_offset), 5) \
                is SyncStatus.OK
            assert slave.commitlog.max_offset >= master.commitlog.max_offset
            assert not proposals  # both members kept up: nothing to change
        finally:
            await s.stop()
            await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()


def test_send_waits_for_the_set_and_a_smaller_set_releases_it(tmp_path):
    master = open_store(tmp_path / "m")
    epochs = load_epochs(master)
    epochs.append(1, 0)
    config = HAConfig(segment_size=SEG, heartbeat_ms=50, sync_timeout_ms=5000)

    async def scenario():
        tracker = SyncStateTracker(1, (1, 2), 1, 0, mono_ms(), SyncConfig(all_ack=True))
        m = AutoSwitchMasterDriver(master, config, "127.0.0.1", 0, epochs, tracker,
                                   lambda p: None)
        await m.start()
        try:
            fill(master, 3)
            m.appended()
            waiting = m.sync(master.commitlog.max_offset)
            await asyncio.sleep(0.2)  # a while in which it must stay unanswered (not a wait)
            assert not waiting.done()  # member 2 holds nothing
            assert master.dispatch_bound == 0  # consumers see only what the set holds
            tracker.applied((1,), 2, 0)  # the controller dropped member 2
            m.set_changed()
            assert await asyncio.wait_for(waiting, 1) is SyncStatus.OK
            assert master.dispatch_bound == master.commitlog.max_offset
        finally:
            await m.stop()
    asyncio.run(scenario())
    master.close()


def test_epochs_past_the_log_end_are_dropped_on_start(tmp_path):
    store = open_store(tmp_path / "s")
    fill(store, 10)
    end = store.commitlog.max_offset
    e = EpochFile(store.config.root / "epochFile")
    e.append(1, 0)
    e.append(2, end)  # a new master's epoch with nothing in it yet: kept
    e.append(3, end + 500)  # the log was cut below it before a crash: dropped
    assert load_epochs(store).entries == [(1, 0), (2, end)]
    store.close()
