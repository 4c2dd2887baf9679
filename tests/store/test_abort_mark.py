"""The abort mark tells a crash of the process (the page cache kept every write) from a
machine restart (unflushed writes may be gone), and a restarted SYNC_MASTER refills from
its slaves only when its restart may have lost something it acknowledged (#34)."""
import random

from ledgermq.broker.modes.classic_ha import restart_may_have_lost
from ledgermq.chaos.disk import cut_unsynced
from ledgermq.store import MessageStore
from ledgermq.store.commitlog import RecoveryReport
from ledgermq.store.config import FlushDiskType

from .conftest import small_config


def crash(store: MessageStore) -> None:
    """Leave the store as a kill -9 would: its files unclosed, the abort mark in place, no
    thread of it left running (a cleaner outliving its test logs a traceback every round
    once the directory is gone; CPython 3.11 formats it with `ast`, not thread-safe)."""
    store._flusher.stop()
    store._cleaner_stop.set()
    store._cleaner.join(timeout=30)
    store._dir_lock.release()


def test_a_crash_in_the_same_boot_is_told_from_a_power_loss(tmp_path):
    s = MessageStore(small_config(tmp_path))
    assert not s.open().crashed
    s.put(s.encode("T", 0, [b"x"] * 10))
    crash(s)
    again = MessageStore(small_config(tmp_path))
    r = again.open()
    assert r.crashed and r.same_boot is True
    assert restart_may_have_lost(r, FlushDiskType.ASYNC_FLUSH) is None
    crash(again)
    cut_unsynced(tmp_path, 0, random.Random(3))  # a power loss: the machine restarted
    third = MessageStore(small_config(tmp_path))
    r = third.open()
    assert r.crashed and r.same_boot is False
    assert restart_may_have_lost(r, FlushDiskType.ASYNC_FLUSH)  # a cut, or the restart
    third.close()
    fourth = MessageStore(small_config(tmp_path))
    assert not fourth.open().crashed  # a clean shutdown
    fourth.close()


def test_only_a_cut_damage_or_a_restarted_machine_may_have_lost_acknowledged_writes():
    clean = RecoveryReport(crashed=False)
    assert restart_may_have_lost(clean, FlushDiskType.ASYNC_FLUSH) is None
    torn = RecoveryReport(crashed=True, same_boot=True, truncated_bytes=40,
                          truncated_reason="body CRC mismatch")
    assert "cut 40 bytes (body CRC mismatch)" in restart_may_have_lost(torn,
                                                                       FlushDiskType.SYNC_FLUSH)
    damaged = RecoveryReport(crashed=True, same_boot=True, damaged_from=77)
    assert "77" in restart_may_have_lost(damaged, FlushDiskType.SYNC_FLUSH)
    unknown = RecoveryReport(crashed=True, same_boot=None)
    assert restart_may_have_lost(unknown, FlushDiskType.ASYNC_FLUSH)
    assert restart_may_have_lost(unknown, FlushDiskType.SYNC_FLUSH) is None
