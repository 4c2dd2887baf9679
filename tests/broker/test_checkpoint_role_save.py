"""Checkpoint mode when the disk refuses to save a role: the replica core had already moved
to it in memory, so the same view again asked nothing (a deposed master whose disk was
full never followed its successor, and its group never had a slave again: chaos seed 1).
Now the broker stands by, starts again from the role on disk, and the next view gives
the actions again."""
import asyncio
from types import SimpleNamespace

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.modes import checkpoint
from ledgermq.broker.modes.checkpoint import CheckpointMode
from ledgermq.peer_auth.core import PeerAuth
from ledgermq.replication.checkpoint import Follow, View
from ledgermq.store import MessageStore

from ..store.conftest import small_config

SLAVE_OF_5 = View(epoch=5, role="SLAVE", slot=2, master_addr="127.0.0.1:1", checkpoint=0,
                  members=(), truncate_to=None)


def test_a_role_the_disk_refused_to_save_is_taken_at_the_next_view(tmp_path, monkeypatch):
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()

    async def role_changed():
        pass
    host = SimpleNamespace(store=store, config=BrokerConfig(controlNodeAddr="127.0.0.1:1"),
                           peer_auth=PeerAuth(), role_changed=role_changed)

    def full(path, epoch, promotion):
        raise OSError(28, "No space left on device (test)")

    async def go():
        mode = CheckpointMode(host)
        try:
            with monkeypatch.context() as m:
                m.setattr(checkpoint, "save_role", full)
                try:
                    await mode.execute(mode.replica.on_view(SLAVE_OF_5, 0))
                except OSError:  # (the heartbeat loop logs what escapes, and goes on)
                    pass
            assert mode.links.slave is None
            again = mode.replica.on_view(SLAVE_OF_5, 0)  # space again: the same view
            assert [a for a in again if isinstance(a, Follow)] == [Follow("127.0.0.1:1", 2)]
            await mode.execute(again)
            assert mode.replica.role == "SLAVE" and mode.links.slave is not None
            assert checkpoint.load_role(mode.role_path)[0] == 5
        finally:
            await mode.links.stop()
            await mode.control.close()
    try:
        asyncio.run(go())
    finally:
        store.close()
