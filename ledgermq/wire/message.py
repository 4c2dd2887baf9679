"""RocketMQ's stored-message layout (message version V1), message ids and tag hashes.

Layout of one stored message, all integers big-endian (IPv4 hosts):

    off  field                       size
    0    TOTALSIZE                   4
    4    MAGICCODE                   4
    8    BODYCRC                     4
    12   QUEUEID                     4
    16   FLAG                        4
    20   QUEUEOFFSET                 8
    28   PHYSICALOFFSET              8
    36   SYSFLAG                     4
    40   BORNTIMESTAMP               8
    48   BORNHOST (ip4 + port)       8   (20 with SYSFLAG_BORNHOST_V6)
    56   STORETIMESTAMP              8
    64   STOREHOSTADDRESS            8   (20 with SYSFLAG_STOREHOST_V6)
    72   RECONSUMETIMES              4
    76   PREPAREDTRANSACTIONOFFSET   8
    84   BODY length                 4, then the body
         TOPIC length                1, then the topic
         PROPERTIES length           2, then the properties

A segment's unused tail starts with a blank marker: TOTALSIZE = bytes left, MAGICCODE = BLANK.
"""
from __future__ import annotations

import operator
import socket
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

MAGIC_CODE = -626843481  # 0xDAA320A7, message version V1 (1-byte topic length)
MAGIC_CODE_V2 = -626843477  # 0xDAA320AB, version V2 (2-byte topic length); decoded only
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end-of-segment marker
END_FILE_MIN_BLANK_LENGTH = 8  # a segment always keeps room for TOTALSIZE + MAGICCODE

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_TRANSACTION_MASK = 0xC  # the transaction type bits of sysFlag
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

# Field offsets for IPv4 hosts (the only form this broker writes).
OFF_TOTALSIZE = 0
OFF_MAGIC = 4
OFF_BODYCRC = 8
OFF_QUEUEID = 12
OFF_FLAG = 16
OFF_QUEUEOFFSET = 20
OFF_PHYSICALOFFSET = 28
OFF_SYSFLAG = 36
OFF_BORNTIMESTAMP = 40
OFF_BORNHOST = 48
OFF_STORETIMESTAMP = 56
OFF_STOREHOST = 64
OFF_RECONSUMETIMES = 72
OFF_PREPARED_OFFSET = 76
OFF_BODYLEN = 84
OFF_BODY = 88
HEADER_SIZE = OFF_BODY  # fixed part before the body (IPv4 hosts)

# Everything before the body in one struct, IPv4 hosts.
HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")
assert HEADER.size == HEADER_SIZE

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_DEDUP = "LMQ_DEDUP"  # ledgermq's own; "1": drop a message whose UNIQ_KEY is stored
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"

MAX_TOPIC_LENGTH = 127  # V1 stores the topic length in one signed byte
MAX_PROPERTIES_LENGTH = 32767  # stored in a signed short


class MessageFormatError(ValueError):
    """A message that cannot be stored, or bytes that are not a stored message."""


def encode_properties(props: dict[str, str] | None) -> bytes:
    if not props:
        return b""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()
    ).encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    text = bytes(raw).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair:
            k, _, v = pair.partition(NAME_VALUE_SEPARATOR)
            out[k] = v
    return out


def property_value(raw: bytes, key: str) -> str | None:
    """One property without decoding the rest: the hot path needs only TAGS or KEYS."""
    needle = key.encode() + b"\x01"
    start = 0
    while True:
        i = raw.find(needle, start)
        if i < 0:
            return None
        if i == 0 or raw[i - 1] == 2:  # must start a pair, not end another key
            j = raw.find(b"\x02", i)
            return raw[i + len(needle): j if j >= 0 else len(raw)].decode("utf-8", "replace")
        start = i + 1


_POWERS_LEN = 256
# _POWERS[n] = (31^(n-1), ..., 31^0) mod 2^32: Java's hash as one C-level sum of products
# (each a slice of one descending table: 48 ms of every process's start-up, built by pow)
_ASCENDING = [1]
for _ in range(_POWERS_LEN - 1):
    _ASCENDING.append(_ASCENDING[-1] * 31 & 0xFFFFFFFF)
_DESCENDING = tuple(reversed(_ASCENDING))
_POWERS = [_DESCENDING[_POWERS_LEN - n:] for n in range(_POWERS_LEN)]


def _to_signed32(h: int) -> int:
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    if s.isascii() and len(s) < _POWERS_LEN:
        return _to_signed32(sum(map(operator.mul, s.encode(), _POWERS[len(s)])))
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _to_signed32(h)


@lru_cache(maxsize=65536)
def tag_hash(tag: str | None) -> int:
    """RocketMQ's tagsCode of a tag: its Java hash code, 0 for no tag."""
    return java_string_hash(tag) if tag else 0


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def pack_host(host: str, port: int) -> bytes:
    """IPv4 address and port as RocketMQ stores them (4 + 4 bytes)."""
    try:
        ip = socket.inet_aton(host)
    except OSError:
        ip = socket.inet_aton(socket.gethostbyname(host))
    return ip + struct.pack(">i", port)


def unpack_host(raw: bytes) -> tuple[str, int]:
    if len(raw) == 8:
        return socket.inet_ntoa(raw[:4]), struct.unpack(">i", raw[4:])[0]
    return socket.inet_ntop(socket.AF_INET6, raw[:16]), struct.unpack(">i", raw[16:])[0]


def offset_msg_id(store_host: bytes, phys_offset: int) -> str:
    """RocketMQ's offset message id: store host (ip + port) and commit-log offset, hex."""
    return (store_host + struct.pack(">q", phys_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(host, port, physical offset) from an offset message id; MessageFormatError if bad."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageFormatError(f"message id {msg_id!r} is not hex") from None
    if len(raw) == 16:
        host, port = unpack_host(raw[:8])
    elif len(raw) == 28:
        host, port = unpack_host(raw[:20])
    else:
        raise MessageFormatError(f"message id {msg_id!r} has {len(raw)} bytes, want 16 or 28")
    return host, port, struct.unpack(">q", raw[-8:])[0]


class _PropertyAccess:
    """Accessors for the properties RocketMQ gives meaning to."""

    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(" ") if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def index_keys(self) -> list[str]:
        """What the key index files this message under: its KEYS and its UNIQ_KEY."""
        return self.keys + ([self.uniq_key] if self.uniq_key else [])


@dataclass
class Message(_PropertyAccess):
    """One message as a producer hands it to the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass
class StoredMessage(_PropertyAccess):
    """A message decoded from its stored bytes."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]


    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.phys_offset)


def encode_message(
    msg: Message,
    *,
    queue_offset: int = 0,
    phys_offset: int = 0,
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00",
) -> bytes:
    """One message in stored form (the reference encoder; batches use wire.batch)."""
    topic = msg.topic.encode()
    props = encode_properties(msg.properties)
    check_lengths(topic, props)
    total = HEADER_SIZE + len(msg.body) + 1 + len(topic) + 2 + len(props)
    head = HEADER.pack(
        total, MAGIC_CODE, body_crc(msg.body), msg.queue_id, msg.flag, queue_offset,
        phys_offset, msg.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6),
        msg.born_timestamp, msg.born_host, store_timestamp, store_host,
        msg.reconsume_times, msg.prepared_transaction_offset, len(msg.body),
    )
    return b"".join((head, msg.body, bytes((len(topic),)), topic,
                     struct.pack(">h", len(props)), props))


def check_lengths(topic: bytes, props: bytes) -> None:
    if not topic:
        raise MessageFormatError("topic is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise MessageFormatError(f"topic is {len(topic)} bytes, at most {MAX_TOPIC_LENGTH}")
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise MessageFormatError(
            f"properties are {len(props)} bytes, at most {MAX_PROPERTIES_LENGTH}")


_I4 = struct.Struct(">i")
_I8 = struct.Struct(">q")
_I2 = struct.Struct(">h")


def queue_offset_and_reconsume(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(queue offset, reconsume times) of the stored message at buf[0:], read in place
    (what a pop needs of a message it hands out as stored); MessageFormatError if it is
    not one."""
    if len(buf) < 8:
        raise MessageFormatError("too short for a message header")
    total, magic = struct.unpack_from(">ii", buf, 0)
    if magic not in (MAGIC_CODE, MAGIC_CODE_V2) or not HEADER_SIZE + 4 <= total <= len(buf):
        raise MessageFormatError(f"not a stored message (magic {magic:#x}, size {total})")
    sys_flag = _I4.unpack_from(buf, OFF_SYSFLAG)[0]
    at = OFF_RECONSUMETIMES + (12 if sys_flag & SYSFLAG_BORNHOST_V6 else 0) + \
        (12 if sys_flag & SYSFLAG_STOREHOST_V6 else 0)
    if at + 4 > total:
        raise MessageFormatError(f"a message of {total} bytes is too short for its hosts")
    return _I8.unpack_from(buf, OFF_QUEUEOFFSET)[0], _I4.unpack_from(buf, at)[0]


def decode_message(buf: bytes | bytearray | memoryview, pos: int = 0, *,
                   check_crc: bool = True, with_body: bool = True) -> StoredMessage:
    """Decode the stored message at buf[pos:]; MessageFormatError if it is not one."""
    mv = memoryview(buf)
    end = len(mv)
    if pos + 8 > end:
        raise MessageFormatError("too short for a message header")
    total, magic = struct.unpack_from(">ii", mv, pos)
    if magic not in (MAGIC_CODE, MAGIC_CODE_V2):
        raise MessageFormatError(f"bad magic code {magic:#x} at {pos}")
    if total < HEADER_SIZE + 4 or pos + total > end:
        raise MessageFormatError(f"bad total size {total} at {pos}")
    p = pos + 8
    crc, qid, flag = struct.unpack_from(">iii", mv, p); p += 12
    qoff, phys = struct.unpack_from(">qq", mv, p); p += 16
    sys_flag, born_ts = struct.unpack_from(">iq", mv, p); p += 12
    hlen = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
    born_host = bytes(mv[p:p + hlen]); p += hlen
    store_ts = _I8.unpack_from(mv, p)[0]; p += 8
    slen = 20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8
    store_host = bytes(mv[p:p + slen]); p += slen
    reconsume, prepared = struct.unpack_from(">iq", mv, p); p += 12
    blen = _I4.unpack_from(mv, p)[0]; p += 4
    if blen < 0 or p + blen > pos + total:
        raise MessageFormatError(f"bad body length {blen} at {pos}")
    body = bytes(mv[p:p + blen]) if with_body else b""
    if check_crc and body_crc(mv[p:p + blen]) != crc:
        raise MessageFormatError(f"body CRC mismatch at {pos}")
    p += blen
    if magic == MAGIC_CODE:
        tlen = mv[p]; p += 1
    else:
        tlen = struct.unpack_from(">h", mv, p)[0]; p += 2
    topic = bytes(mv[p:p + tlen]).decode("utf-8", "replace"); p += tlen
    if p + 2 > pos + total:
        raise MessageFormatError(f"truncated properties at {pos}")
    plen = _I2.unpack_from(mv, p)[0]; p += 2
    if plen < 0 or p + plen != pos + total:
        raise MessageFormatError(f"sizes do not add up to TOTALSIZE at {pos}")
    props = decode_properties(mv[p:p + plen])
    return StoredMessage(total, magic, crc, qid, flag, qoff, phys, sys_flag, born_ts,
                         born_host, store_ts, store_host, reconsume, prepared, body,
                         topic, props)
