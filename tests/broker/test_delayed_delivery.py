"""A delayed message delivered to its topic reads as RocketMQ 5 delivers it: its DELAY
level kept (RocketMQ's own end-to-end suite checks the delay against it; it was dropped)."""
from ledgermq.broker.access.system_topics import SCHEDULE_TOPIC
from ledgermq.broker.delivery.schedule import ScheduleService
from ledgermq.store import MessageStore
from ledgermq.wire.message import decode_message, encode_properties

from ..store.conftest import small_config


def test_a_delivered_message_keeps_its_delay_level(tmp_path):
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    try:
        props = encode_properties({"REAL_TOPIC": "Later", "REAL_QID": "0", "DELAY": "3",
                                   "TAGS": "t"})
        store.append(store.encode(SCHEDULE_TOPIC, 2, [b"m"], props))
        service = ScheduleService(store, [0, 0, 0], tmp_path / "delayOffset.json")
        assert service.deliver_due(now_ms=1 << 62) == 1
        (msg,) = [decode_message(m) for m in
                  store.get_messages("Later", 0, 0, 10, 1 << 20).messages()]
        assert msg.body == b"m" and msg.properties["DELAY"] == "3"
        assert msg.properties["TAGS"] == "t"
    finally:
        store.close()
