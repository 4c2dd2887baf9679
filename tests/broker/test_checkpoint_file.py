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
from ledgermq.peer_auth.core import PeerAuth
from ledgermq.replication.checkpoint import Lead
from ledgermq.store import MessageStore, PutResult

from ..store.conftest import small_config
from ..wait import until


def test_the_checkpoint_file_is_synced_and_a_torn_save_keeps_the_one_before(tmp_path,
                                                                            monkeypatch):
    synced = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def sync(fd, real=real):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)
        monkeypatch.setattr(os, name, sync)
    path = tmp_path / "checkpoint"
    f = CheckpointFile(path)
    f.save(3, 1234, ((2, 1234),))
    assert synced == [str(path), str(tmp_path)]  # its bytes, then its directory entry
    f.save(3, 2000, ((2, 2000),))
    assert synced[2:] == [str(path)]
    assert CheckpointFile(path).load() == (3, 2000, {2: 2000})
    data = bytearray(path.read_bytes())  # a crash tore the newest record (the 2nd: slot 0)
    data[30] ^= 0xFF
    path.write_bytes(bytes(data))
    assert CheckpointFile(path).load() == (3, 1234, {2: 1234})
    f2 = CheckpointFile(path)
    f2.save(4, 10, ())  # goes over the torn one, not the one kept
    assert CheckpointFile(path).load() == (4, 10, {})


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
                           role_changed=role_changed, peer_auth=PeerAuth())
    mode = CheckpointMode(host)
    in_file = lambda: mode.checkpoint_file.load()[1]  # noqa: E731
    acked, told = [], []  # (end or checkpoint, the file's checkpoint at that moment)

    async def scenario():
        mode.replica.epoch = 1
        await mode._lead(Lead(epoch=1, checkpoint=0, members=(), slot=1))
        ha = mode.links.master

        async def addr():
            return f"127.0.0.1:{ha.port}"
        s = HASlaveDriver(slave, ha.core.config, addr, slave_id=2, epoch=1,
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
