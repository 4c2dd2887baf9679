"""The body of a SEND_BATCH_MESSAGE request: messages back to back, each as RocketMQ's
MessageDecoder.encodeMessage lays it out (all integers big-endian):

    TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, FLAG 4, body length 4 + body,
    properties length 2 + properties
"""
from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np

from .batch import put_be
from .message import MessageFormatError
from .native import twin
from .scan_batch import tags_and_keys

_BATCH_HEAD = struct.Struct(">iiiii")  # total, magic, body crc, flag, body length
_I2 = struct.Struct(">h")


# bodies and properties are memoryviews (Any: callers hand them on as the store's bytes)
@twin("split_batch")
def split_batch(body: bytes | memoryview) -> tuple[list[Any], list[Any], list[int],
                                                 list[str | None], list[list[str]]]:
    """(bodies, properties, flags, tags, index keys) of the messages in `body`; bodies and
    properties are views into it (no copies). A message's tag is its TAGS property (None
    without one), its index keys are KEYS split on spaces, then UNIQ_KEY."""
    mv = memoryview(body)
    size = len(mv)
    bodies, props, flags, prop_starts, prop_ends = [], [], [], [], []
    unpack_head, unpack_i2 = _BATCH_HEAD.unpack_from, _I2.unpack_from
    pos = 0
    while pos < size:
        if pos + 20 > size:
            raise MessageFormatError(f"batch body truncated at byte {pos}")
        total, _, _, flag, blen = unpack_head(mv, pos)
        end = pos + total
        p = pos + 20 + blen
        if total < 22 or end > size or blen < 0 or p + 2 > end or \
                unpack_i2(mv, p)[0] != end - p - 2:
            raise MessageFormatError(f"batch message at byte {pos} has inconsistent sizes")
        bodies.append(mv[pos + 20:p])
        props.append(mv[p + 2:end])
        prop_starts.append(p + 2)
        prop_ends.append(end)
        flags.append(flag)
        pos = end
    if not bodies:
        raise MessageFormatError("empty batch")
    tags, keys = tags_and_keys(mv.tobytes(), np.array(prop_starts, np.int64),
                               np.array(prop_ends, np.int64))
    return bodies, props, flags, tags, keys


_HEAD_LEN = 20  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, body length


@twin("encode_batch_body")
def encode_batch_body(bodies: Sequence[bytes], props: Sequence[bytes],
                      flags: Sequence[int]) -> bytes:
    """A SEND_BATCH_MESSAGE body (MAGICCODE and BODYCRC left 0, as RocketMQ's clients
    send them): one join, then sizes written in place with numpy."""
    n = len(bodies)
    if len(props) != n:
        raise ValueError("one properties entry per body is required")
    parts: list[Any] = [None] * (4 * n)
    parts[0::4] = [bytes(_HEAD_LEN)] * n
    parts[1::4] = bodies
    parts[2::4] = [b"\0\0"] * n
    parts[3::4] = props
    buf = bytearray().join(parts)
    blen = np.fromiter(map(len, bodies), np.int64, n)
    plen = np.fromiter(map(len, props), np.int64, n)
    sizes = _HEAD_LEN + blen + 2 + plen
    starts = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    u8 = np.frombuffer(buf, np.uint8)
    put_be(u8, starts, sizes, 4)
    put_be(u8, starts + 12, np.asarray(flags, np.int64), 4)
    put_be(u8, starts + 16, blen, 4)
    put_be(u8, starts + _HEAD_LEN + blen, plen, 2)
    return bytes(buf)
