"""Checkpoint mode's (S3) own file on a master: the consistent checkpoint it seeds a
restart in the same epoch with. It is fsynced (file and directory) before any write it
covers is acknowledged, before the slaves are told of it, and before the control node is."""
import asyncio
import os
from types import SimpleNamespace

from ledgermq.broker import load_broker_config
from ledgermq.broker.modes import CheckpointMode
from ledgermq.drivers.checkpoint_files import CheckpointFile
from ledgermq.drivers.ha import HASlaveDriver
from ledgermq.replication.checkpoint import Lead
from ledgermq.store import MessageStore, PutResult

from ..store.conftest import small_config
from ..wait import until


def test_the_checkpoint_file_is_fsynced_with_its_directory(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    f = CheckpointFile(tmp_path / "checkpoint.json")
    f.save(3, 1234, ((2, 1234),))
    assert f.load() == (3, 1234, {2: 1234})
    assert str(tmp_path / "checkpoint.json.tmp") in synced  # the bytes, before the rename
    assert str(tmp_path) in synced  # the rename


def test_no_write_is_acknowledged_past_the_checkpoint_in_the_masters_file(tmp_path):
    """A master in checkpoint mode with a slave (ASYNC_FLUSH): at the moment each write is
    acknowledged, and each time the slave is told a checkpoint, the master's checkpoint
    file already covers it (its restart in the same epoch starts from the file)."""
    config = load_broker_config(None, {
        "enableConsistentCheckpoint": "true", "controlNodeAddr": "127.0.0.1:1",
        "listenPort": "0", "haListenPort": "0", "brokerIP1": "127.0.0.1"})[0]
    master = MessageStore(small_config(tmp_path / "m"))
    slave = MessageStore(small_config(tmp_path / "s"))
    master.open()
    slave.open()

    async def role_changed():
        pass
    host = SimpleNamespace(store=master, config=config, address="127.0.0.1:0",
                           role_changed=role_changed)
    mode = CheckpointMode(host)
    in_file = lambda: mode.checkpoint_file.load()[1]  # noqa: E731
    acked, told = [], []  # (end or checkpoint, the file's checkpoint at that moment)

    async def scenario():
        mode.replica.epoch = 1
        await mode._lead(Lead(epoch=1, checkpoint=0, members=(), slot=1))
        ha = mode.links.master

        async def addr():
            return f"127.0.0.1:{ha.port}"
        s = HASlaveDriver(slave, ha.core.config, addr, slave_id=2,
                          on_checkpoint=lambda cp: told.append((cp, in_file())))
        await s.start()
        try:
            await until(lambda: ha.core.members, "the slave joined the checkpoint")
            for burst in range(30):
                laters = [mode.write(master.encode("CP", 0, [b"x" * 200]))
                          for _ in range(5)]
                for later in laters:
                    later.future.add_done_callback(lambda f: acked.append((f.result(),
                                                                          in_file())))
                await asyncio.wait_for(asyncio.gather(*(x.future for x in laters)), 10)
            await until(lambda: told and told[-1][0] == master.commitlog.max_offset,
                        "the slave told the last checkpoint")
        finally:
            await s.stop()
            await mode.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()
    assert len(acked) == 150
    assert [r for r, _ in acked if not isinstance(r, PutResult) or not r.ok] == []
    early = [(r.end_offset, cp) for r, cp in acked if cp < r.end_offset]
    assert early == [], f"acknowledged past the file's checkpoint: {early[:5]}"
    early = [(cp, f) for cp, f in told if f < cp]
    assert early == [], f"the slave was told more than the file holds: {early[:5]}"
