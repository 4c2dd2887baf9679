"""Where a message a consumer group failed goes next: its group's retry topic, or its
dead-letter topic once it was delivered retryMaxTimes times (or the caller gives up on
it). Shared by CONSUMER_SEND_MSG_BACK and POP's revive."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ...wire.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, StoredMessage

if TYPE_CHECKING:
    from ..broker import Broker


def redelivery(broker: "Broker", group: str, msg: StoredMessage, origin_id: str | None = None,
               give_up: bool = False, max_times: int | None = None
               ) -> tuple[str, int, dict[str, str], bool]:
    """(topic, queue, properties, dead): the properties keep the original topic and id."""
    sg = broker.subgroups.for_consumer(group)
    if max_times is None:
        max_times = sg.retryMaxTimes if sg else broker.config.maxReconsumeTimes
    props = dict(msg.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin_id or msg.msg_id)
    if give_up or msg.reconsume_times >= max_times:
        topic, qid = broker.topics.dlq(group)
        return topic, qid, props, True
    tc = broker.topics.retry(group, sg.retryQueueNums if sg else 1)
    return tc.topicName, random.randrange(tc.writeQueueNums), props, False
