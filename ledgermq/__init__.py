"""ledgermq: a RocketMQ-compatible message broker with a replicated commit log."""
__version__ = "0.1.0"

from .client import (  # noqa: E402
    ConsumeStatus, LocalTransactionState, Message, MessageExt, MessageQueue, MessageSelector,
    MQClientError,
    Producer, PullConsumer, PullResult, PullStatus, PushConsumer, SendResult, SendStatus,
    SyncProducer, SyncPullConsumer, SyncPushConsumer, TransactionProducer,
)

__all__ = ["ConsumeStatus", "Message", "MessageExt", "MessageQueue", "MQClientError",
           "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer",
           "SendResult", "SendStatus", "SyncProducer", "SyncPullConsumer", "SyncPushConsumer",
           "LocalTransactionState", "MessageSelector", "TransactionProducer"]
