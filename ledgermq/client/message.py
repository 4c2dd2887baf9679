"""What client code sees: messages to send, send results, received messages, queues."""
from __future__ import annotations

import enum
import itertools
import os
import socket
import struct
import time
from dataclasses import dataclass, field

from ..store.message import (
    PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_RETRY_TOPIC, PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY, StoredMessage, decode_message, encode_properties,
)


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}


@dataclass
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0

    def all_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        return props


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass
class SendResult:
    status: SendStatus
    msg_id: str  # the client's unique id (UNIQ_KEY); comma-joined for a batch
    offset_msg_id: str  # the broker's store-host + offset id; comma-joined for a batch
    queue: MessageQueue
    queue_offset: int


@dataclass
class MessageExt:
    """A received message: the stored fields plus where it came from."""

    stored: StoredMessage
    queue: MessageQueue

    @property
    def topic(self) -> str:
        # messages redelivered through %RETRY%group carry their original topic
        return self.stored.properties.get(PROPERTY_RETRY_TOPIC, self.stored.topic)

    @property
    def body(self) -> bytes:
        return self.stored.body

    @property
    def tags(self) -> str | None:
        return self.stored.tags

    @property
    def keys(self) -> list[str]:
        return self.stored.keys

    @property
    def properties(self) -> dict[str, str]:
        return self.stored.properties

    @property
    def queue_offset(self) -> int:
        return self.stored.queue_offset

    @property
    def queue_id(self) -> int:
        return self.stored.queue_id

    @property
    def reconsume_times(self) -> int:
        return self.stored.reconsume_times

    @property
    def msg_id(self) -> str:
        return self.stored.properties.get(PROPERTY_UNIQ_KEY) or self.stored.msg_id

    @property
    def offset_msg_id(self) -> str:
        return self.stored.msg_id

    @property
    def commit_log_offset(self) -> int:
        return self.stored.phys_offset

    @property
    def born_timestamp(self) -> int:
        return self.stored.born_timestamp

    @property
    def store_timestamp(self) -> int:
        return self.stored.store_timestamp


def decode_pulled(body: bytes, queue: MessageQueue) -> list[MessageExt]:
    """The messages of a pull response body (stored messages back to back)."""
    out = []
    pos = 0
    mv = memoryview(body)
    while pos + 4 <= len(mv):
        size = struct.unpack_from(">i", mv, pos)[0]
        if size <= 0 or pos + size > len(mv):
            break
        out.append(MessageExt(decode_message(mv[pos:pos + size], check_crc=False), queue))
        pos += size
    return out


class UniqueIdGenerator:
    """32-hex-digit unique message ids in RocketMQ's client layout: ip, pid, a start
    marker, then time since the start of the month and a counter."""

    def __init__(self):
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = (ip + struct.pack(">h", os.getpid() & 0x7FFF) +
                        struct.pack(">i", id(self) & 0x7FFFFFFF)).hex().upper()
        now = time.localtime()
        self._start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        self._counter = itertools.count()

    def next(self) -> str:
        elapsed = int((time.time() - self._start) * 1000) & 0x7FFFFFFF
        return self._prefix + struct.pack(">ih", elapsed, next(self._counter) & 0x7FFF).hex().upper()


def properties_string(props: dict[str, str]) -> str:
    return encode_properties(props).decode()
