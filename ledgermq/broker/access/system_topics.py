"""The topics only the broker writes, and the check that keeps clients' sends out of them
(RocketMQ's TopicValidator names where RocketMQ has them)."""
from __future__ import annotations

AUTO_CREATE_TOPIC = "TBW102"  # the template topic of auto-creation
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# transactions: half messages, the decisions on them, and those never decided
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # timer messages until due (RocketMQ 5's name)
POP_ACK_TOPIC = "rmq_sys_POP_ACK"  # POP acks, so that a new master knows them
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# the topics only the broker writes (RocketMQ's TopicValidator not-allowed-send set, ours)
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC, TRANS_CHECK_MAX_TOPIC, TIMER_TOPIC,
    POP_ACK_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})


def client_may_send(topic: str) -> bool:
    """Whether a client's send may write into `topic` (no system topic)."""
    return topic not in NOT_ALLOWED_SEND_TOPICS and not topic.startswith(SYSTEM_TOPIC_PREFIX)
