"""Pulled stored messages (back to back, as the broker sends them) straight into Arrow
columns with numpy: fixed-offset fields are gathered for all messages at once and bodies
copied into one buffer, instead of decoding message by message.

The fast path covers RocketMQ's V1 layout with IPv4 hosts (what ledgermq and RocketMQ's
brokers write); anything else goes through the client's per-message decoder.
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from ..wire.message import MAGIC_CODE, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from ..wire.scan_batch import pair_ends, property_spans

_SIZE = struct.Struct(">i")
QUEUE_OFFSET, SYSFLAG, BORN_TS, STORE_TS, STORE_HOST, PHYS = 20, 36, 40, 56, 64, 28
BODY_LEN, BODY = 84, 88


def message_starts(raw) -> np.ndarray:
    """Start of every whole message in `raw`. Messages of one size (common: fixed-size
    records from one producer) are found at once, checked, without a loop."""
    n = len(raw)
    if n >= 4:
        size = _SIZE.unpack_from(raw, 0)[0]
        if size > 0 and n % size == 0:
            guess = np.arange(0, n, size, dtype=np.int64)
            buf = np.frombuffer(raw, dtype=np.uint8)
            if (_be(buf, guess, 4) == size).all():
                return guess
    out, pos = [], 0
    unpack = _SIZE.unpack_from
    while pos + 4 <= n:
        size = unpack(raw, pos)[0]
        if size <= 0 or pos + size > n:
            break
        out.append(pos)
        pos += size
    return np.array(out, dtype=np.int64)


def _be(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of `width` bytes at positions `at` of a uint8 array."""
    idx = at[:, None] + np.arange(width)
    return buf[idx].copy().view(f">i{width}").ravel().astype(np.int64)


def gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate buf[starts[i]:starts[i]+lengths[i]]; returns (bytes, int32 offsets).

    Pieces of about one length (bodies of similar size, ids) are copied as rows of a
    sliding window and trimmed with a mask: a row copy each, instead of an index per byte."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    widest = int(lengths.max()) if len(lengths) else 0
    if 0 < widest and widest * len(lengths) <= 2 * total and \
            int(starts.max()) + widest <= len(buf):
        rows = np.lib.stride_tricks.sliding_window_view(buf, widest)[starts]
        data = rows.ravel() if widest * len(lengths) == total else \
            rows[np.arange(widest) < lengths[:, None]]
        return data, offsets.astype(np.int32)
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(total)
    return buf[idx], offsets.astype(np.int32)


def binary_array(data: np.ndarray, offsets: np.ndarray, kind=pa.binary()) -> pa.Array:
    return pa.Array.from_buffers(kind, len(offsets) - 1,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def fixed_columns(raw) -> dict | None:
    """Columns of the pulled messages, or None if the fast path does not apply."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    starts = message_starts(raw)
    if not len(starts):
        return {"n": 0}
    magic = _be(buf, starts + 4, 4)
    sysflag = _be(buf, starts + SYSFLAG, 4)
    if (magic != MAGIC_CODE).any() or (sysflag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)).any():
        return None
    blen = _be(buf, starts + BODY_LEN, 4)
    topic_at = starts + BODY + blen
    tlen = buf[topic_at].astype(np.int64)
    plen_at = topic_at + 1 + tlen
    plen = _be(buf, plen_at, 2)
    props_at = plen_at + 2
    body, body_offsets = gather(buf, starts + BODY, blen)
    return {"n": len(starts), "starts": starts, "queue_offset": _be(buf, starts + QUEUE_OFFSET, 8),
            "born_ts": _be(buf, starts + BORN_TS, 8), "store_ts": _be(buf, starts + STORE_TS, 8),
            "phys": _be(buf, starts + PHYS, 8), "body": binary_array(body, body_offsets),
            "props_at": props_at, "props_end": props_at + plen, "buf": buf}


def property_array(cols: dict, key: bytes) -> pa.Array:
    """The value of property `key` of every message (null where absent), found for all
    messages at once: candidate positions by byte compare, mapped to the property region
    they lie in, the value up to the next separator gathered into one string buffer."""
    buf, n = cols["buf"], cols["n"]
    at, end = cols["props_at"], cols["props_end"]
    seps = cols.get("seps")
    if seps is None:  # where every property pair ends, shared by the keys looked up
        seps = cols["seps"] = pair_ends(buf)
    m, start, stop = property_spans(buf, at, end, key, seps)
    starts, lengths = np.zeros(n, np.int64), np.zeros(n, np.int64)
    starts[m], lengths[m] = start, stop - start
    present = np.zeros(n, bool)
    present[m] = True
    data, offsets = gather(buf, starts, lengths)
    return pa.Array.from_buffers(pa.string(), n, [
        pa.py_buffer(np.packbits(present, bitorder="little")), pa.py_buffer(offsets),
        pa.py_buffer(data)])
