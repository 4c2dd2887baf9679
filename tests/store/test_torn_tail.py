"""A power loss that kept a message's body but not the page holding the end of its
properties (#28, chaos async seed 5: the consumer read a message whose key ended in
zeros, "never sent"). The body CRC cannot see it; a stored message never ends in a zero
byte, so recovery cuts it as the torn tail it is."""
from ledgermq.store import MessageStore
from ledgermq.store.marks.checkpoint import Checkpoint, save_checkpoint
from ledgermq.store.store import CHECKPOINT_FILE
from ledgermq.wire.message import encode_properties

from .conftest import small_config


def test_a_message_whose_properties_end_in_zeros_is_cut_by_recovery(tmp_path):
    root = tmp_path / "store"
    store = MessageStore(small_config(root))
    store.open()
    ends = []
    for i in range(5):
        props = encode_properties({"KEYS": f"p1-{i:07d}", "UNIQ_KEY": f"u{i}"})
        r = store.append(store.encode("Torn", 0, [b"body-%d" % i], props))
        ends.append(r.end_offset)
    store.close()
    # the power loss: the last page of the last message never reached the disk, and the
    # checkpoint is from before that message (its fsync had not run)
    last_start, end = ends[-2], ends[-1]
    seg = min(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
    with open(seg, "r+b") as f:
        f.seek(end - 12)
        f.write(bytes(12))
    save_checkpoint(root / CHECKPOINT_FILE, Checkpoint(last_start, last_start))
    store = MessageStore(small_config(root))
    report = store.open()
    try:
        assert store.commitlog.max_offset == last_start, report
        assert "torn write" in report.truncated_reason
        got = store.get_messages("Torn", 0, 0, 10, 1 << 20)
        assert got.message_count == 4
    finally:
        store.close()
