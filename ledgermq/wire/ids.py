"""Message ids. The client's (MessageClientIDSetter): a per-producer hex prefix (ip, pid,
a start marker), then 4 bytes of milliseconds since the start of the month and a 2-byte
counter. The broker's offset ids: store host (ip + port) and commit-log offset. All
upper-case hex."""
from __future__ import annotations

import struct

import numpy as np

from .native import twin


@twin("unique_ids")
def unique_ids(prefix: str, elapsed: int, first: int, n: int) -> list[str]:
    """n ids: `prefix`, then `elapsed` (31 bits) and counters first..first+n-1 (15 bits
    each), one hex conversion for the lot."""
    if not prefix.isascii():
        raise ValueError("the id prefix must be ASCII hex")
    if n < 0:
        raise ValueError("negative count")
    tail = np.empty((n, 6), np.uint8)
    tail[:, :4] = np.frombuffer(struct.pack(">i", elapsed & 0x7FFFFFFF), np.uint8)
    counters = (np.arange(first, first + n, dtype=np.int64) & 0x7FFF).astype(">i2")
    tail[:, 4:] = counters.view(np.uint8).reshape(n, 2)
    text = tail.tobytes().hex().upper()
    return [prefix + text[i:i + 12] for i in range(0, 12 * n, 12)]


@twin("offset_msg_ids")
def offset_msg_ids(store_host: bytes, phys_offsets: np.ndarray) -> list[str]:
    """The offset message id of each commit-log offset (int64 array), in one hex pass."""
    n = len(phys_offsets)
    raw = np.empty((n, len(store_host) + 8), np.uint8)
    raw[:, :len(store_host)] = np.frombuffer(store_host, np.uint8)
    raw[:, len(store_host):] = np.asarray(phys_offsets, ">i8").view(np.uint8).reshape(n, 8)
    text = raw.tobytes().hex().upper()
    w = 2 * raw.shape[1]
    return [text[i:i + w] for i in range(0, len(text), w)]
