"""The Python client: asyncio-native producer and consumers, with blocking wrappers."""
from .consumer import ConsumeStatus, PullConsumer, PullResult, PullStatus, PushConsumer
from .instance import MQClientError
from .message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from .pull import MessageSelector
from .producer import Producer, select_by_hash
from .sync import SyncProducer, SyncPullConsumer, SyncPushConsumer
from .transaction import LocalTransactionState, TransactionProducer

__all__ = ["ConsumeStatus", "PullConsumer", "PullResult", "PullStatus", "PushConsumer",
           "MQClientError", "Message", "MessageExt", "MessageQueue", "SendResult",
           "SendStatus", "Producer", "select_by_hash", "SyncProducer", "SyncPullConsumer",
           "SyncPushConsumer", "LocalTransactionState", "TransactionProducer", "MessageSelector"]
