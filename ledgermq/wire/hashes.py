"""Java's String.hashCode over many strings at once: the index files every message under
hashes of its keys (store/index.py)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .message import _POWERS, _POWERS_LEN, java_string_hash as _pure_java_string_hash
from .native import twin

# one key (the index's single-message path): compiled beside its twin in message.py
java_string_hash = twin("java_string_hash")(_pure_java_string_hash)


def _arrays(native: Callable[..., Any]) -> Callable[[list[str]], np.ndarray]:
    """The C version returns a bytearray of int64s: viewed as a numpy array."""
    def java_string_hashes(strings: list[str]) -> np.ndarray:
        return np.frombuffer(native(strings), np.int64)
    return java_string_hashes


@twin("java_string_hashes", adapt=_arrays)
def java_string_hashes(strings: list[str]) -> np.ndarray:
    """java_string_hash of many strings at once (numpy), as an int64 array."""
    if not strings:
        return np.zeros(0, np.int64)
    enc = [x.encode() for x in strings]
    width = max(map(len, enc))
    if width == 0:  # empty strings only: hash 0 (a zero-width matrix cannot be reshaped)
        return np.zeros(len(strings), np.int64)
    if width >= _POWERS_LEN or not all(map(bytes.isascii, enc)):
        return np.fromiter(map(java_string_hash, strings), np.int64, len(strings))
    # right-aligned rows: leading zero bytes add nothing to the hash
    mat = np.frombuffer(b"".join(e.rjust(width, b"\0") for e in enc), np.uint8)
    mat = mat.reshape(-1, width).astype(np.uint64)
    h: np.ndarray = (mat * np.array(_POWERS[width], np.uint64)).sum(axis=1) & np.uint64(0xFFFFFFFF)
    return h.astype(np.int64) - ((h.astype(np.int64) & 0x80000000) << 1)
