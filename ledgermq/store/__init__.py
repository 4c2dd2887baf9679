"""The message store: RocketMQ-format commit log, consume queues, index, flush, recovery."""
from ..wire.batch import EncodedBatch, encode_batch
from .config import FlushDiskType, StoreConfig
from .mapped_file import DiskFullError, StoreError
from ..wire.message import (
    Message, MessageFormatError, StoredMessage, decode_message, encode_message,
)
from .results import GetResult, GetStatus, PutResult, PutStatus
from .store import MessageStore

__all__ = [
    "EncodedBatch", "encode_batch", "FlushDiskType", "StoreConfig", "DiskFullError",
    "StoreError", "Message", "MessageFormatError", "StoredMessage", "decode_message",
    "encode_message", "GetResult", "GetStatus", "PutResult", "PutStatus", "MessageStore",
]
