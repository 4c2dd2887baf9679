"""What client code sees: messages to send, send results, received messages, queues."""
from __future__ import annotations

import collections
import enum
import itertools
import os
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..wire.ids import unique_ids
from ..wire.scan import split_pulled
from ..wire.message import (
    MAGIC_CODE_V2, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS, PROPERTY_UNIQ_KEY, SYSFLAG_BORNHOST_V6, SYSFLAG_COMPRESSED,
    SYSFLAG_STOREHOST_V6, StoredMessage,
    _PropertyAccess, decode_message, decode_properties, encode_properties, offset_msg_id,
)


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
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
    deliver_time_ms: int = 0  # a timer message: delivered at this time (epoch ms)

    def all_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        if self.deliver_time_ms:
            props["TIMER_DELIVER_MS"] = str(self.deliver_time_ms)  # RocketMQ 5's property
        return props


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    PENDING = "PENDING"  # checkpoint mode (S3): resolve it (Producer.resolve) before resending


@dataclass(frozen=True)
class Pending:
    """What a checkpoint-mode broker says about a send it could not yet vouch for."""

    broker_name: str
    epoch: int  # the master's epoch when it stored the message
    end: int  # commit-log offset just past the message(s)
    msg_id: str  # the control node's name for it
    control_node: str


@dataclass
class SendResult:
    status: SendStatus
    msg_id: str  # the client's unique id (UNIQ_KEY); comma-joined for a batch
    offset_msg_id: str  # the broker's store-host + offset id; comma-joined for a batch
    queue: MessageQueue
    queue_offset: int
    pending: Pending | None = None


_FIXED = struct.Struct(">iiiiiqqiq")  # through BORNTIMESTAMP
_I4 = struct.Struct(">i")
_I8 = struct.Struct(">q")
_I2 = struct.Struct(">h")


class MessageExt(_PropertyAccess):
    """A received message, decoded lazily from its stored bytes: a consumer that only
    reads bodies never pays for parsing properties."""

    __slots__ = ("raw", "queue", "_fixed", "_layout", "_props")

    def __init__(self, raw: memoryview, queue: MessageQueue,
                 fixed: tuple[int, ...] | None = None):
        self.raw = raw
        self.queue = queue
        self._fixed: tuple[int, ...] = _FIXED.unpack_from(raw, 0) if fixed is None else fixed
        self._layout: tuple[int, int, int, int, int, int] | None = None
        self._props: dict[str, str] | None = None

    def _where(self) -> tuple[int, int, int, int, int, int]:
        """(store-ts at, body at, body len, topic at, topic len, props at)."""
        if self._layout is None:
            raw, sys_flag = self.raw, self._fixed[7]
            p = 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8)
            ts_at = p
            p += 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 12
            blen = _I4.unpack_from(raw, p)[0]
            body_at = p + 4
            p = body_at + blen
            if self._fixed[1] == MAGIC_CODE_V2:
                tlen, topic_at = _I2.unpack_from(raw, p)[0], p + 2
            else:
                tlen, topic_at = raw[p], p + 1
            self._layout = (ts_at, body_at, blen, topic_at, tlen, topic_at + tlen + 2)
        return self._layout

    @property
    def stored(self) -> StoredMessage:
        return decode_message(self.raw, check_crc=False)

    @property  # read-only here; _PropertyAccess only needs to read it
    def properties(self) -> dict[str, str]:  # type: ignore[override]
        if self._props is None:
            self._props = decode_properties(self.raw[self._where()[5]:])
        return self._props

    @property
    def stored_topic(self) -> str:
        _, _, _, at, n, _ = self._where()
        return str(self.raw[at:at + n], "utf-8", "replace")

    @property
    def topic(self) -> str:
        # messages redelivered through %RETRY%group carry their original topic
        return self.properties.get(PROPERTY_RETRY_TOPIC) or self.stored_topic

    @property
    def body(self) -> bytes:
        """The body; one a Java client compressed (SYSFLAG_COMPRESSED) comes back inflated."""
        _, at, n, _, _, _ = self._where()
        raw = bytes(self.raw[at:at + n])
        if self._fixed[7] & SYSFLAG_COMPRESSED:
            try:
                return zlib.decompress(raw)
            except zlib.error:
                return raw  # not what the flag claims: hand over the bytes as stored
        return raw

    @property
    def queue_id(self) -> int:
        return self._fixed[3]

    @property
    def flag(self) -> int:
        return self._fixed[4]

    @property
    def queue_offset(self) -> int:
        return self._fixed[5]

    @property
    def commit_log_offset(self) -> int:
        return self._fixed[6]

    @property
    def born_timestamp(self) -> int:
        return self._fixed[8]

    @property
    def store_timestamp(self) -> int:
        ts: int = _I8.unpack_from(self.raw, self._where()[0])[0]
        return ts

    @property
    def reconsume_times(self) -> int:
        at = self._where()[0] + 8 + (20 if self._fixed[7] & SYSFLAG_STOREHOST_V6 else 8)
        times: int = _I4.unpack_from(self.raw, at)[0]
        return times

    @property
    def store_host(self) -> bytes:
        at = self._where()[0] + 8
        return bytes(self.raw[at:at + (20 if self._fixed[7] & SYSFLAG_STOREHOST_V6 else 8)])

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    def __repr__(self) -> str:
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, body={self.body[:40]!r})")


def decode_pulled(body: bytes, queue: MessageQueue) -> list[MessageExt]:
    """The messages of a pull response body (stored messages back to back)."""
    views, heads = split_pulled(body)
    return list(map(MessageExt, views, itertools.repeat(queue), heads))


class UniqueIdGenerator:
    """32-hex-digit unique message ids in RocketMQ's client layout: ip, pid, a start
    marker, then time since the start of the month and a counter."""

    def __init__(self) -> None:
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

    def next_many(self, n: int) -> list[str]:
        """n ids at once (wire.ids.unique_ids)."""
        elapsed = int((time.time() - self._start) * 1000) & 0x7FFFFFFF
        first = next(self._counter)
        collections.deque(itertools.islice(self._counter, n - 1), maxlen=0)  # skip n - 1
        ids: list[str] = unique_ids(self._prefix, elapsed, first, n)
        return ids


def properties_string(props: dict[str, str]) -> str:
    return encode_properties(props).decode()
