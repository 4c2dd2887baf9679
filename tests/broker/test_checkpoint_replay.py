"""Checkpoint mode's promotion replay (S3-5) on a real store: a cached batch that straddles
the takeover offset T (the new master got only its first messages) is replayed from T on,
so every message of the batch is stored exactly once."""
from types import SimpleNamespace

from ledgermq.broker.modes.checkpoint import CheckpointMode
from ledgermq.replication.checkpoint import Cached, CheckpointReplica, Promote, Replay
from ledgermq.store import MessageStore
from ledgermq.wire.message import decode_message

from ..store.conftest import small_config


def _bodies(store: MessageStore) -> list[bytes]:
    log, out, pos = store.commitlog, [], 0
    while pos < log.max_offset:
        m = decode_message(log.read(pos, log.size_at(pos)))
        out.append(bytes(m.body))
        pos += m.total_size
    return out


def test_a_batch_straddling_the_takeover_is_replayed_from_the_takeover_on(tmp_path):
    old, new = MessageStore(small_config(tmp_path / "old")), \
        MessageStore(small_config(tmp_path / "new"))
    old.open()
    new.open()
    try:
        first = old.append(old.encode("T", 0, [b"before"]))
        batch = old.append(old.encode("T", 1, [b"b-0", b"b-1", b"b-2"]))
        starts = [int(o) for o in batch.phys_offsets]
        takeover = starts[1]  # the new master received the batch's first message only
        new.append_raw(0, bytes(old.commitlog.read(0, takeover)))
        assert _bodies(new) == [b"before", b"b-0"]
        data = bytes(old.commitlog.read(starts[0], batch.end_offset - starts[0]))
        cached = Cached(starts[0], batch.end_offset, "1-straddling", data)
        replica = CheckpointReplica(epoch=1)
        promote = Promote("new", 2, 2, (cached,), first.end_offset, ())
        replay = replica.on_promote(promote, takeover)[-1]
        assert replay == Replay(promote, takeover)
        actions = CheckpointMode._replay(SimpleNamespace(store=new, replica=replica), replay)
        assert _bodies(new) == [b"before", b"b-0", b"b-1", b"b-2"]  # each message once
        # the control node learns where the replayed part landed: from T to the new end
        moved = actions[-1].promotion.replayed
        assert moved == ((starts[0], takeover, new.commitlog.max_offset),)
    finally:
        old.close()
        new.close()
