"""Messages the broker parks in its own system topics (delayed, timer, half messages) and
later delivers to the topic and queue they were sent to."""
from __future__ import annotations

from ...store.store import check_topic
from ...wire.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, MessageFormatError
from ..meta.topic_table import MAX_QUEUE_NUMS


class BadParked(ValueError):
    """A parked message's destination the broker cannot trust (see parked_destination)."""


def parked_destination(props: dict[str, str]) -> tuple[str, int]:
    """Where a message the broker parked (delayed, timer, half) really goes, read back
    from its own system topic and checked before use: a bad value (written before clients
    were kept out of these topics, or damaged) must be logged and skipped, never make a
    topic of a million queues nor stop the service that reads it. BadParked says why."""
    topic = props.get(PROPERTY_REAL_TOPIC)
    if not topic:
        raise BadParked("it has no REAL_TOPIC")
    try:
        check_topic(topic)
    except MessageFormatError as e:
        raise BadParked(f"its REAL_TOPIC is not a topic: {e}") from None
    raw = props.get(PROPERTY_REAL_QUEUE_ID, "0")
    try:
        qid = int(raw)
    except ValueError:
        qid = -1
    if not 0 <= qid < MAX_QUEUE_NUMS:
        raise BadParked(f"its REAL_QID {raw[:20]!r} is not a queue id (0..{MAX_QUEUE_NUMS - 1})")
    return topic, qid
