"""ledgermq: a RocketMQ-compatible message broker with a replicated commit log."""
__version__ = "0.1.0"

__all__ = ["ConsumeStatus", "Message", "MessageExt", "MessageQueue", "MQClientError",
           "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer",
           "SendResult", "SendStatus", "SyncProducer", "SyncPullConsumer", "SyncPushConsumer",
           "LocalTransactionState", "MessageSelector", "TransactionProducer"]


def __getattr__(name: str):
    """The client API, imported on first use (`from ledgermq import Producer`): a server
    process never loads the client (~0.2 s of imports at every start)."""
    if name in __all__:
        from . import client
        return getattr(client, name)
    raise AttributeError(f"module 'ledgermq' has no attribute {name!r}")
