"""Walking stored messages in a byte range: recovery, replica appends and lookups use it.

The walk validates each message (magic code, sizes adding up, PHYSICALOFFSET equal to its
position, body CRC when asked, a last byte that is not zero) and stops at the first one
that fails, which is where a torn tail begins.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .native import twin
from .message import (
    MessageFormatError, BLANK_MAGIC_CODE, HEADER_SIZE, MAGIC_CODE, MAGIC_CODE_V2, PROPERTY_KEYS, PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, property_value, tag_hash,
)

_HEAD = struct.Struct(">iiii")
_QOFF_PHYS = struct.Struct(">qq")
_I4 = struct.Struct(">i")
_I8 = struct.Struct(">q")
_I2 = struct.Struct(">h")


@dataclass(slots=True)
class ScannedMessage:
    """What dispatch needs of one stored message."""

    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tag_code: int
    store_timestamp: int
    index_keys: list[str]


# Why a walk stopped.
END = "end"  # zero TOTALSIZE: nothing written here yet
BLANK = "blank"  # end-of-segment marker: continue at the next segment
LIMIT = "limit"  # reached the requested upper bound
CORRUPT = "corrupt"  # a message failed validation: torn or damaged tail


def index_keys_of(props: bytes) -> list[str]:
    keys = property_value(props, PROPERTY_KEYS)
    out = [k for k in keys.split(" ") if k] if keys else []
    uniq = property_value(props, PROPERTY_UNIQ_KEY)
    if uniq:
        out.append(uniq)
    return out


def walk(view: memoryview, pos: int, limit: int, base: int, seg_end: int, *,
         check_crc: bool = True, want_keys: bool = True,
         out: list[ScannedMessage] | None = None) -> tuple[int, str, str]:
    """Walk messages in view[pos:limit].

    `base` is the logical offset of view[0] and `seg_end` the position in `view` where the
    segment ends (no message crosses it). Appends a ScannedMessage per valid message to
    `out` and returns (stop position, reason, detail).
    """
    out = [] if out is None else out
    append = out.append
    crc32 = zlib.crc32
    while True:
        if pos >= limit:
            return pos, LIMIT, ""
        if pos + 8 > seg_end:
            return pos, CORRUPT, "header runs past the segment end"
        if pos + 8 > limit:
            return pos, LIMIT, ""
        total, magic = struct.unpack_from(">ii", view, pos)
        if total == 0 and magic == 0:
            return pos, END, ""
        if magic == BLANK_MAGIC_CODE:
            if total != seg_end - pos:
                return pos, CORRUPT, f"blank marker of {total} bytes, segment has {seg_end - pos} left"
            return pos, BLANK, ""
        if magic != MAGIC_CODE and magic != MAGIC_CODE_V2:
            return pos, CORRUPT, f"bad magic code {magic & 0xFFFFFFFF:#010x}"
        if total < HEADER_SIZE + 4 or pos + total > seg_end:
            return pos, CORRUPT, f"bad total size {total}"
        if pos + total > limit:
            return pos, LIMIT, ""
        _, _, crc, qid = _HEAD.unpack_from(view, pos)
        qoff, phys = _QOFF_PHYS.unpack_from(view, pos + 20)
        if phys != base + pos:
            return pos, CORRUPT, f"PHYSICALOFFSET {phys} stored at {base + pos}"
        sys_flag = _I4.unpack_from(view, pos + 36)[0]
        p = pos + 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8)
        end = pos + total
        if p + 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 16 > end:
            return pos, CORRUPT, "header runs past TOTALSIZE (IPv6 host flags)"
        store_ts = _I8.unpack_from(view, p)[0]
        p += 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 12
        blen = _I4.unpack_from(view, p)[0]
        p += 4
        if blen < 0 or p + blen + 3 > end:
            return pos, CORRUPT, f"bad body length {blen}"
        if check_crc and (crc32(view[p:p + blen]) & 0x7FFFFFFF) != crc:
            return pos, CORRUPT, "body CRC mismatch"
        p += blen
        if magic == MAGIC_CODE:
            tlen = view[p]
            p += 1
        else:
            tlen = _I2.unpack_from(view, p)[0]
            p += 2
        topic_end = p + tlen
        if topic_end + 2 > end:
            return pos, CORRUPT, "topic runs past the message"
        topic = str(view[p:topic_end], "utf-8", "replace")
        plen = _I2.unpack_from(view, topic_end)[0]
        if plen < 0 or topic_end + 2 + plen != end:
            return pos, CORRUPT, "sizes do not add up to TOTALSIZE"
        if view[end - 1 if plen else topic_end - 1] == 0:
            # stored properties never end in a zero byte (they end with their separator;
            # sends ending in one are refused), nor does a topic name: zeros here are a
            # page a power loss never wrote, which the body CRC does not cover
            return pos, CORRUPT, "it ends in a zero byte: a torn write"
        props = bytes(view[topic_end + 2:end]) if plen else b""
        tag = property_value(props, PROPERTY_TAGS) if plen else None
        keys = index_keys_of(props) if (want_keys and plen) else []
        append(ScannedMessage(base + pos, total, topic, qid, qoff, tag_hash(tag), store_ts, keys))
        pos = end


FIXED_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE through BORNTIMESTAMP


@twin("split_pulled")
def split_pulled(body: bytes | memoryview) -> tuple[list[memoryview], list[tuple[int, ...]]]:
    """The stored messages back to back in a pull response body: a view of each and its
    fixed header fields (TOTALSIZE through BORNTIMESTAMP), up to the first that is cut
    short or has no positive TOTALSIZE."""
    mv = memoryview(body)
    views, heads = [], []
    pos, end = 0, len(mv)
    unpack, head = _I4.unpack_from, FIXED_HEAD.unpack_from
    while pos + 4 <= end:
        size = unpack(mv, pos)[0]
        if size <= 0 or pos + size > end:
            break
        if size < FIXED_HEAD.size:
            raise MessageFormatError(
                f"stored message at byte {pos} is {size} bytes, shorter than its header")
        views.append(mv[pos:pos + size])
        heads.append(head(mv, pos))
        pos += size
    return views, heads
