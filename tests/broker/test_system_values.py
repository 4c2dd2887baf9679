"""Values the broker reads back from its own system topics are checked before use (#31):
a damaged delayed message is logged and skipped, and the delayed messages behind it are
still delivered (before, decoding it raised on every round: its level never moved again)."""
import logging

from ledgermq.broker.delivery.schedule import ScheduleService
from ledgermq.broker.access.system_topics import SCHEDULE_TOPIC
from ledgermq.store import MessageStore
from ledgermq.wire.message import decode_message, encode_properties

from ..store.conftest import small_config


def test_a_damaged_delayed_message_does_not_block_the_ones_behind_it(tmp_path, caplog):
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    try:
        parked = []
        for body in (b"damaged", b"fine"):
            props = encode_properties({"REAL_TOPIC": "Later", "REAL_QID": "0", "DELAY": "1"})
            r = store.append(store.encode(SCHEDULE_TOPIC, 0, [body], props))
            parked.append(int(r.phys_offsets[0]))
        seg = store.commitlog.files.find(parked[0])
        with open(seg.path, "r+b") as f:  # flip one byte of the first body: a bad CRC
            raw = bytes(store.commitlog.read(parked[0], parked[1] - parked[0]))
            at = raw.index(b"damaged") + parked[0] - seg.start
            f.seek(at)
            f.write(b"D")
        service = ScheduleService(store, [0], tmp_path / "delayOffset.json")
        with caplog.at_level(logging.ERROR):
            moved = service.deliver_due(now_ms=1 << 62)
        assert moved == 1 and "unreadable" in caplog.text
        got = store.get_messages("Later", 0, 0, 10, 1 << 20)
        assert [decode_message(m).body for m in got.messages()] == [b"fine"]
        assert service.offsets[1] == 2  # past both: the level moves on
    finally:
        store.close()

