"""Vectorized encoding of a batch of messages into the stored layout.

A batch for one (topic, queue) is laid out in one buffer with a single join; the per-message
header fields are then written in place with numpy scatters, so the Python work per message
is a length and a CRC, not a struct.pack per field.  Offsets and the store timestamp are
filled in by the commit log once it has reserved space (`fill_positions`).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, cast

import numpy as np

from .native import twin, twin_or_fallback
from .message import (
    HEADER, MAGIC_CODE, OFF_BODYCRC, OFF_BODYLEN, OFF_BORNTIMESTAMP, OFF_FLAG, OFF_PHYSICALOFFSET,
    OFF_QUEUEOFFSET, OFF_STORETIMESTAMP, OFF_TOTALSIZE, HEADER_SIZE, MessageFormatError,
    MAX_PROPERTIES_LENGTH, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, check_lengths, tag_hash,
)

_LANES = {w: np.arange(w, dtype=np.int64) for w in (2, 4, 8)}


def put_be(u8: np.ndarray, pos: np.ndarray, values: np.ndarray | Sequence[int],
           width: int) -> None:
    """Write big-endian integers of `width` bytes at byte positions `pos` of `u8`."""
    raw = np.asarray(values, dtype=f">i{width}").view(np.uint8).reshape(-1, width)
    u8[pos[:, None] + _LANES[width]] = raw


def get_be(u8: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Read big-endian integers of `width` bytes at byte positions `pos` of `u8`."""
    raw = np.ascontiguousarray(u8[pos[:, None] + _LANES[width]])
    return raw.view(f">i{width}").reshape(-1).astype(np.int64)


ONE_START = (0,)
LOCALHOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"  # 127.0.0.1:0, the default host fields
# the host fields are written 8 bytes wide (IPv4): a caller's sysFlag may not say otherwise,
# or readers would look for every later field in the wrong place
HOST_V6_FLAGS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6


@dataclass(slots=True)
class EncodedBatch:
    """Messages of one (topic, queue) back to back in stored form, positions not yet set.
    A batch of one carries tuples instead of arrays (numpy's per-call cost dominates it)."""

    topic: str
    queue_id: int
    buf: bytearray
    starts: np.ndarray | tuple[int, ...]  # int64, start of each message in buf
    sizes: np.ndarray | tuple[int, ...]  # int64, TOTALSIZE of each message
    tag_codes: np.ndarray | tuple[int, ...]  # int64, tag hash per message (consume-queue entry)
    index_keys: list[list[str]] | None = None  # per message, keys for the index file
    store_timestamp: int = 0
    queue_offsets: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> int:
        return len(self.buf)


def encode_batch(
    topic: str,
    queue_id: int,
    bodies: Sequence[bytes],
    properties: Sequence[bytes] | bytes = b"",
    tags: Sequence[str | None] | str | None = None,
    *,
    flag: int | Sequence[int] = 0,
    sys_flag: int = 0,
    born_timestamp: int | Sequence[int] = 0,
    born_host: bytes = LOCALHOST,
    store_host: bytes = LOCALHOST,
    reconsume_times: int = 0,
    index_keys: list[list[str]] | None = None,
    max_message_size: int = 4 * 1024 * 1024,
) -> EncodedBatch:
    """Encode `bodies` (with encoded `properties`, shared or one per message) as one batch."""
    n = len(bodies)
    if n == 0:
        raise MessageFormatError("empty batch")
    if n == 1 and isinstance(born_timestamp, int):
        return encode_one(topic, queue_id, bodies[0], properties, tags, flag, sys_flag,
                          born_timestamp, born_host, store_host, reconsume_times, index_keys,
                          max_message_size)
    topic_raw = topic.encode()
    shared_props = isinstance(properties, (bytes, bytearray))
    check_lengths(topic_raw, cast(bytes, properties) if shared_props
                  else max(cast("Sequence[bytes]", properties), key=len))
    if not shared_props and len(properties) != n:
        raise MessageFormatError("one properties entry per message is required")
    scalar_born = isinstance(born_timestamp, int)
    scalar_flag = isinstance(flag, int)
    template = HEADER.pack(0, MAGIC_CODE, 0, queue_id, flag if scalar_flag else 0, 0, 0,
                           sys_flag & ~HOST_V6_FLAGS,
                           born_timestamp if scalar_born else 0, born_host, 0, store_host,
                           reconsume_times, 0, 0)
    buf, starts, sizes = encode_stored(template, bytes((len(topic_raw),)) + topic_raw, bodies,
                                       properties, flag, born_timestamp, max_message_size)
    if tags is None or isinstance(tags, str):
        tag_codes = np.full(n, tag_hash(tags), dtype=np.int64)
    else:
        tag_codes = np.fromiter(map(tag_hash, tags), dtype=np.int64, count=n)
    return EncodedBatch(topic, queue_id, buf, starts, sizes, tag_codes, index_keys)


def _arrays(native: Callable[..., Any]) -> Callable[..., tuple[bytearray, np.ndarray, np.ndarray]]:
    """The C version returns its int64 columns as bytearrays: viewed as numpy arrays."""
    def encode_stored(*args: Any) -> tuple[bytearray, np.ndarray, np.ndarray]:
        buf, starts, sizes = native(*args)
        return buf, np.frombuffer(starts, np.int64), np.frombuffer(sizes, np.int64)
    return encode_stored


@twin("encode_stored", adapt=_arrays)
def encode_stored(template: bytes, topic_block: bytes, bodies: Sequence[bytes],
                  properties: Sequence[bytes] | bytes, flag: int | Sequence[int],
                  born_timestamp: int | Sequence[int], max_message_size: int
                  ) -> tuple[bytearray, np.ndarray, np.ndarray]:
    """`bodies` laid out as stored messages, back to back: (buffer, starts, sizes).
    `template` is the 88-byte header every message starts from; TOTALSIZE, BODYCRC and
    the body length are set per message, FLAG and BORNTIMESTAMP where given per message,
    positions are left for fill_positions."""
    n = len(bodies)
    shared_props = isinstance(properties, (bytes, bytearray))
    if not shared_props and len(properties) != n:
        raise MessageFormatError("one properties entry per message is required")
    body_lens = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    if shared_props:
        prop_lens = np.full(n, len(properties), dtype=np.int64)
        tail = topic_block + struct.pack(">h", len(properties)) + bytes(cast(bytes, properties))
        parts: list[Any] = [template, None, tail] * n  # None: a body's place
        parts[1::3] = bodies
    else:
        prop_lens = np.fromiter(map(len, cast("Sequence[bytes]", properties)), dtype=np.int64,
                                count=n)
        parts = [template, None, topic_block + b"\0\0", None] * n
        parts[1::4] = bodies
        parts[3::4] = properties
    sizes = HEADER_SIZE + body_lens + len(topic_block) + 2 + prop_lens
    too_big = sizes > max_message_size
    if too_big.any():
        i = int(np.argmax(too_big))
        raise MessageFormatError(
            f"message {i} is {int(sizes[i])} bytes, above maxMessageSize {max_message_size}")
    buf = bytearray().join(parts)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    u8 = np.frombuffer(buf, dtype=np.uint8)
    put_be(u8, starts + OFF_TOTALSIZE, sizes, 4)
    crcs = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=n) & 0x7FFFFFFF
    put_be(u8, starts + OFF_BODYCRC, crcs, 4)
    put_be(u8, starts + OFF_BODYLEN, body_lens, 4)
    if not isinstance(born_timestamp, int):
        put_be(u8, starts + OFF_BORNTIMESTAMP, np.asarray(born_timestamp, np.int64), 8)
    if not isinstance(flag, int):
        put_be(u8, starts + OFF_FLAG, np.asarray(flag, np.int64), 4)
    if not shared_props:
        put_be(u8, starts + HEADER_SIZE + body_lens + len(topic_block), prop_lens, 2)
    return buf, starts, sizes


def encode_one(topic: str, queue_id: int, body: bytes, props: Sequence[bytes] | bytes,
               tag: Sequence[str | None] | str | None, flag: int | Sequence[int], sys_flag: int,
               born_timestamp: int, born_host: bytes, store_host: bytes, reconsume_times: int,
               index_keys: list[list[str]] | None, max_message_size: int) -> EncodedBatch:
    """A batch of one, without numpy's per-call overhead (the single-send path).
    `props`, `tag` and `flag` may be given as one-element lists, as encode_batch takes them."""
    if not isinstance(props, (bytes, bytearray)):
        props = props[0]
    if tag is not None and not isinstance(tag, str):
        tag = tag[0]
    if not isinstance(flag, int):
        flag = int(flag[0])
    block = _topic_blocks.get(topic)
    if block is None:
        block = _topic_block(topic)
    if len(props) > MAX_PROPERTIES_LENGTH:
        check_lengths(topic.encode(), props)  # raises, saying why
    buf = stored_message(block, body, props, queue_id, flag, sys_flag & ~HOST_V6_FLAGS,
                         born_timestamp, born_host, store_host, reconsume_times,
                         max_message_size)
    return EncodedBatch(topic, queue_id, buf, ONE_START, (len(buf),), (tag_hash(tag),),
                        index_keys)


@twin_or_fallback("stored_message")
def stored_message(topic_block: bytes, body: bytes, props: bytes, queue_id: int, flag: int,
                   sys_flag: int, born_timestamp: int, born_host: bytes, store_host: bytes,
                   reconsume_times: int, max_message_size: int) -> bytearray:
    """One message in the stored layout, its positions and store time left 0 for the
    append (encode_stored for a batch of one, without the template and arrays)."""
    size = HEADER_SIZE + len(body) + len(topic_block) + 2 + len(props)
    if size > max_message_size:
        raise MessageFormatError(
            f"message 0 is {size} bytes, above maxMessageSize {max_message_size}")
    head = HEADER.pack(size, MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, queue_id, flag, 0, 0,
                       sys_flag, born_timestamp, born_host, 0, store_host, reconsume_times,
                       0, len(body))
    return bytearray().join((head, body, topic_block, len(props).to_bytes(2, "big"), props))


_topic_blocks: dict[str, bytes] = {}  # topic -> its length byte + UTF-8, as stored


def _topic_block(topic: str) -> bytes:
    raw = topic.encode()
    check_lengths(raw, b"")
    block = bytes((len(raw),)) + raw
    if len(_topic_blocks) < 100_000:
        _topic_blocks[topic] = block
    return block


POSITIONS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET (adjacent)
TIMESTAMP = struct.Struct(">q")


def _batch_fields(native: Callable[..., Any]) -> Callable[..., None]:
    """The C version takes the batch's buffer and starts."""
    def fill_positions(batch: EncodedBatch, lo: int, hi: int, first_phys: int,
                       first_queue_offset: int, store_timestamp: int) -> None:
        native(batch.buf, batch.starts, lo, hi, first_phys, first_queue_offset,
               store_timestamp)
    return fill_positions


@twin("fill_positions", adapt=_batch_fields)
def fill_positions(batch: EncodedBatch, lo: int, hi: int, first_phys: int,
                   first_queue_offset: int, store_timestamp: int) -> None:
    """Set QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of messages lo..hi-1 in place."""
    if hi <= lo:  # an empty range
        return
    if hi - lo == 1:
        at = int(batch.starts[lo])
        POSITIONS.pack_into(batch.buf, at + OFF_QUEUEOFFSET, first_queue_offset, first_phys)
        TIMESTAMP.pack_into(batch.buf, at + OFF_STORETIMESTAMP, store_timestamp)
        return
    u8 = np.frombuffer(batch.buf, dtype=np.uint8)
    starts = cast(np.ndarray, batch.starts[lo:hi])  # 2+ messages: arrays, not tuples
    put_be(u8, starts + OFF_QUEUEOFFSET,
           np.arange(first_queue_offset, first_queue_offset + (hi - lo), dtype=np.int64), 8)
    put_be(u8, starts + OFF_PHYSICALOFFSET, starts - starts[0] + first_phys, 8)
    put_be(u8, starts + OFF_STORETIMESTAMP, np.full(hi - lo, store_timestamp, np.int64), 8)
