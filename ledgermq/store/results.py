"""What store operations answer: put and get statuses as RocketMQ names them."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ..wire.ids import offset_msg_ids
from ..wire.message import offset_msg_id


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"  # controller mode
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # disk full, store shutting down
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    # members are singletons: hashed by identity, not by Enum's Python-level __hash__ (a
    # status is looked up in a dict or set several times on every send)
    __hash__ = object.__hash__


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    error: str = ""
    phys_offsets: np.ndarray | None = None  # commit-log offset of each message
    queue_offset: int = -1  # queue offset of the first message
    count: int = 0
    end_offset: int = 0  # commit-log offset just past the batch
    store_timestamp: int = 0
    wrote_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    def msg_id_text(self, store_host: bytes) -> str:
        """The msg_ids joined by commas, as a send's answer carries them."""
        phys = self.phys_offsets
        if phys is not None and len(phys) == 1:
            return offset_msg_id(store_host, int(phys[0]))
        return ",".join(self.msg_ids(store_host))

    def msg_ids(self, store_host: bytes) -> list[str]:
        """Offset message ids (store host + commit-log offset, hex), built in one pass."""
        if self.phys_offsets is None:
            return []
        if len(self.phys_offsets) == 1:
            return [offset_msg_id(store_host, int(self.phys_offsets[0]))]
        return offset_msg_ids(store_host, np.ascontiguousarray(self.phys_offsets, np.int64))


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    # stored bytes of the messages found, as zero-copy views; contiguous messages share one
    buffers: list[memoryview] = field(default_factory=list)
    message_count: int = 0
    total_bytes: int = 0
    queue_offsets: np.ndarray | list[int] | None = None  # queue offset of each message found

    def messages(self) -> list[memoryview]:
        """One view per message (splits the contiguous runs)."""
        out: list[memoryview] = []
        for buf in self.buffers:
            pos = 0
            while pos < len(buf):
                size = int.from_bytes(buf[pos:pos + 4], "big")
                out.append(buf[pos:pos + size])
                pos += size
        return out
