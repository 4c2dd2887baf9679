"""Vectorized walk of a range of stored messages (the replica's append path).

One cheap Python pass finds message boundaries; numpy then reads and checks every header
field at once (PHYSICALOFFSET, sizes adding up), the body CRCs go through zlib in a
C-level map, and tags/keys come from one regex pass per property. Anything unusual (the
V2 magic code, IPv6 hosts) is handed to the careful one-message-at-a-time walk.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .batch import get_be
from .message import (
    BLANK_MAGIC_CODE, HEADER_SIZE, MAGIC_CODE, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY,
    SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, property_value, tag_hash,
)
from .native import twin
from .scan import BLANK, CORRUPT, END, LIMIT, ScannedMessage, index_keys_of, walk

_HEAD = struct.Struct(">ii")
# up to this many messages numpy's fixed cost per call (~75 µs for a walk) exceeds the
# work: they are walked one at a time (measured crossover: 32-64 messages of 100 bytes)
FEW = 32


@dataclass
class ScannedBatch:
    """Dispatch facts of consecutive messages, as arrays (as tuples for a few messages,
    where numpy's per-call cost would dominate)."""

    phys: np.ndarray | tuple[int, ...]
    sizes: np.ndarray | tuple[int, ...]
    queue_ids: np.ndarray | tuple[int, ...]
    queue_offsets: np.ndarray | tuple[int, ...]
    store_timestamps: np.ndarray | tuple[int, ...]
    tag_codes: np.ndarray | tuple[int, ...]
    topics: list[str]
    index_keys: list[list[str]]

    def __len__(self) -> int:
        return len(self.phys)


def batch_from_messages(msgs: list[ScannedMessage]) -> ScannedBatch:
    n = len(msgs)
    topics, keys = [m.topic for m in msgs], [m.index_keys for m in msgs]
    if 0 < n <= FEW:  # tuples: one pass, no numpy
        phys, sizes, qids, qoffs, stamps, tag_codes = zip(*(
            (m.phys, m.size, m.queue_id, m.queue_offset, m.store_timestamp, m.tag_code)
            for m in msgs))
        return ScannedBatch(phys, sizes, qids, qoffs, stamps, tag_codes, topics, keys)

    def arr(attr: str) -> np.ndarray:
        return np.fromiter((getattr(m, attr) for m in msgs), np.int64, n)
    return ScannedBatch(arr("phys"), arr("size"), arr("queue_id"), arr("queue_offset"),
                        arr("store_timestamp"), arr("tag_code"), topics, keys)


def property_spans(buf: np.ndarray, at: np.ndarray, end: np.ndarray, key: bytes,
                   seps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where property `key` has its value in each of many property regions
    [at[i], end[i]) of `buf` (uint8), found for all messages at once: (message numbers,
    value starts, value ends), for the messages that have it. Candidates come from one
    byte compare, count only inside a region at the start of a pair, and of a property
    given twice the first counts (as property_value reads it). `seps` is pair_ends(buf)."""
    k = np.frombuffer(key + b"\x01", np.uint8)
    cand = np.flatnonzero(buf[:len(buf) - len(k) + 1] == k[0])
    if len(cand):
        cand = cand[np.all(buf[cand[:, None] + np.arange(len(k))] == k, axis=1)]
    m = np.searchsorted(at, cand, side="right") - 1
    m0 = np.maximum(m, 0)
    # the key and its \x01 lie wholly inside the region (not across into the next)
    ok = (m >= 0) & (cand + len(k) <= end[m0]) & \
        ((cand == at[m0]) | (buf[np.maximum(cand - 1, 0)] == 2))
    cand, m = cand[ok], m[ok]
    m, first = np.unique(m, return_index=True)
    start = cand[first] + len(k)
    return m, start, np.minimum(seps[np.searchsorted(seps, start)], end[m])


def pair_ends(buf: np.ndarray) -> np.ndarray:
    """Positions of every pair separator in `buf`, then its length (shared by lookups)."""
    return np.append(np.flatnonzero(buf == 2), len(buf))


def property_per_message(raw: bytes, starts: np.ndarray | Sequence[int],
                         ends: np.ndarray | Sequence[int], key: bytes,
                         seps: np.ndarray | None = None) -> dict[int, str]:
    """{message number: value} of one property over property regions
    [starts[i], ends[i]) of `raw` (see property_spans)."""
    if key + b"\x01" not in raw:
        return {}
    buf = np.frombuffer(raw, np.uint8)
    m, s, e = property_spans(buf, np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                             key, pair_ends(buf) if seps is None else seps)
    return {i: raw[a:b].decode("utf-8", "replace")
            for i, a, b in zip(m.tolist(), s.tolist(), e.tolist())}


@twin("tags_and_keys")
def tags_and_keys(raw: bytes, starts: np.ndarray,
                  ends: np.ndarray) -> tuple[list[str | None], list[list[str]]]:
    """Per message: its TAGS, and the keys the index files it under (KEYS, then UNIQ_KEY),
    from property regions [starts[i], ends[i]) of `raw` (int64 arrays; found vectorized,
    only the values found become Python strings)."""
    at, end = np.asarray(starts, np.int64), np.asarray(ends, np.int64)  # once for 3 keys
    seps = pair_ends(np.frombuffer(raw, np.uint8))
    tags_at, keys_at, uniq_at = (property_per_message(raw, at, end, k.encode(), seps)
                                 for k in (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY))
    n = len(at)
    tags: list[str | None] = [tags_at.get(i) for i in range(n)] if tags_at else [None] * n
    if not keys_at and len(uniq_at) == n and all(uniq_at.values()):  # the usual batch
        return tags, [[u] for u in uniq_at.values()]
    return tags, [([k for k in keys_at[i].split(" ") if k] if i in keys_at else []) +
                  ([uniq_at[i]] if uniq_at.get(i) else []) for i in range(n)]


# why walk_positions stopped, beside scan's reasons: a message the careful walk must judge
UNUSUAL = "unusual"
_REASONS = (LIMIT, END, BLANK, CORRUPT, UNUSUAL)  # the compiled twin returns an index
_NO_POSITIONS = np.zeros(0, np.int64)


def _positions_from_native(native: Callable[..., Any]
                           ) -> Callable[..., tuple[int, str, np.ndarray]]:
    def walk_positions(view: memoryview, pos: int, limit: int, base: int,
                       seg_end: int) -> tuple[int, str, np.ndarray]:
        stop, why, positions = native(view, pos, limit, base, seg_end)
        return stop, _REASONS[why], np.frombuffer(positions, np.int64)
    return walk_positions


@twin("walk_positions", adapt=_positions_from_native)
def walk_positions(view: memoryview, pos: int, limit: int, base: int,
                   seg_end: int) -> tuple[int, str, np.ndarray]:
    """The fast walk's pass over the stored messages of view[pos:limit] (a segment's bytes
    up to seg_end; view[0] is at commit-log offset `base`): where it stopped, why, and
    where each message before that starts. Why is LIMIT, END, BLANK or CORRUPT (a header
    past the segment end) as scan.walk says, or UNUSUAL, with (pos, no positions): some
    message needs the careful one-at-a-time walk to judge it (the V2 magic code, IPv6
    hosts, a PHYSICALOFFSET that is not where it lies, sizes that do not add up, a body
    CRC that does not match)."""
    positions: list[int] = []
    unpack = _HEAD.unpack_from
    p, reason = pos, LIMIT
    while p < limit:
        if p + 8 > seg_end:
            reason = CORRUPT
            break
        if p + 8 > limit:
            break
        total, magic = unpack(view, p)
        if total == 0 and magic == 0:
            reason = END
            break
        if magic != MAGIC_CODE or total < HEADER_SIZE + 4 or p + total > seg_end:
            if magic == BLANK_MAGIC_CODE and total == seg_end - p:
                reason = BLANK
                break
            return pos, UNUSUAL, _NO_POSITIONS
        if p + total > limit:
            break
        positions.append(p)
        p += total
    P = np.array(positions, np.int64)
    if len(P) and not _all_plain(view, P, base):
        return pos, UNUSUAL, _NO_POSITIONS
    return p, reason, P


def _all_plain(view: memoryview, P: np.ndarray, base: int) -> bool:
    """Whether every message at P has IPv4 hosts, its own offset, sizes that add up and
    its body's CRC (checked for all at once)."""
    u8 = np.frombuffer(view, np.uint8)
    sizes = get_be(u8, P, 4)
    if (get_be(u8, P + 36, 4) & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)).any():
        return False
    blen = get_be(u8, P + 84, 4)
    if not ((get_be(u8, P + 28, 8) == base + P) & (blen >= 0) &
            (HEADER_SIZE + blen + 3 <= sizes)).all():
        return False
    props_at = P + HEADER_SIZE + blen + 1 + u8[P + HEADER_SIZE + blen] + 2
    if not (props_at <= P + sizes).all() or \
            not (get_be(u8, props_at - 2, 2) == P + sizes - props_at).all():
        return False
    bodies_at = (P + HEADER_SIZE).tolist()
    crcs = np.fromiter(map(zlib.crc32, (view[a:a + b] for a, b in zip(bodies_at, blen.tolist()))),
                       np.int64, len(P)) & 0x7FFFFFFF
    return bool((crcs == get_be(u8, P + 8, 4)).all())


_FIXED = struct.Struct(">iiiiiq")  # TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET
_I4 = struct.Struct(">i")
_I8 = struct.Struct(">q")


@twin("scanned_columns")
def scanned_columns(view: memoryview | bytes, positions: Any, base: int
                    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                               tuple[int, ...], tuple[int, ...], tuple[int, ...], list[str],
                               list[list[str]]] | None:
    """A few messages' ScannedBatch columns, as the careful walk gives them (phys, sizes,
    queue ids, queue offsets, store timestamps and tag codes as tuples; topics and index
    keys as lists): the messages starting at `positions` (int64s) of `view`, whose first
    byte is commit-log offset `base`. None if one is not a plain stored message there
    (the V1 magic code, IPv4 hosts, sizes adding up within the view, a last byte that is
    not zero): the careful walk judges those. What walk_positions checked before (the
    body CRC, PHYSICALOFFSET) is not checked again."""
    size = len(view)
    cols: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [])
    for p in np.frombuffer(positions, np.int64).tolist():
        if p < 0 or p + HEADER_SIZE + 4 > size:
            return None
        total, magic, _, qid, _, qoff = _FIXED.unpack_from(view, p)
        if magic != MAGIC_CODE or total < HEADER_SIZE + 4 or p + total > size or \
                _I4.unpack_from(view, p + 36)[0] & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
            return None
        blen = _I4.unpack_from(view, p + 84)[0]
        if blen < 0 or HEADER_SIZE + blen + 3 > total:
            return None
        topic_at = p + HEADER_SIZE + blen + 1
        topic_end = topic_at + view[topic_at - 1]
        end = p + total
        if topic_end + 2 > end or struct.unpack_from(">h", view, topic_end)[0] != \
                end - topic_end - 2:
            return None
        props = bytes(view[topic_end + 2:end])
        if view[end - 1 if props else topic_end - 1] == 0:  # (see scan.walk)
            return None
        tag = property_value(props, PROPERTY_TAGS) if props else None
        for col, value in zip(cols, (base + p, total, qid, qoff, _I8.unpack_from(view, p + 56)[0],
                                     tag_hash(tag), str(view[topic_at:topic_end], "utf-8",
                                                        "replace"),
                                     index_keys_of(props) if props else [])):
            col.append(value)
    return (tuple(cols[0]), tuple(cols[1]), tuple(cols[2]), tuple(cols[3]), tuple(cols[4]),
            tuple(cols[5]), cols[6], cols[7])


def walk_batch(view: memoryview, pos: int, limit: int, base: int,
               seg_end: int, few: int = FEW) -> tuple[int, str, str, ScannedBatch]:
    """As scan.walk (same stop position, reason and detail), returning arrays. Ranges of
    at most `few` messages, and ranges with anything unusual, take the one-at-a-time walk."""
    p, reason, P = walk_positions(view, pos, limit, base, seg_end)
    if reason == UNUSUAL:
        return _careful(view, pos, limit, base, seg_end)
    detail = "header runs past the segment end" if reason == CORRUPT else ""
    if 0 < len(P) <= few:  # (a replica's push of one send: no numpy)
        cols = scanned_columns(view, P, base)
        if cols is None:
            return _careful(view, pos, limit, base, seg_end)
        return p, reason, detail, ScannedBatch(*cols)
    if not len(P):
        return p, reason, detail, batch_from_messages([])
    u8 = np.frombuffer(view, np.uint8)
    sizes = get_be(u8, P, 4)
    blen = get_be(u8, P + 84, 4)
    tlen = u8[P + HEADER_SIZE + blen].astype(np.int64)
    props_at = P + HEADER_SIZE + blen + 1 + tlen + 2
    topic_at = P + HEADER_SIZE + blen + 1
    t0, n0 = int(topic_at[0]), int(tlen[0])
    if (tlen == n0).all() and (u8[topic_at[:, None] + np.arange(n0)] == u8[t0:t0 + n0]).all():
        topics = [str(view[t0:t0 + n0], "utf-8", "replace")] * len(P)  # one topic: the rule
    else:
        topics = [str(view[a:a + n], "utf-8", "replace")
                  for a, n in zip(topic_at.tolist(), tlen.tolist())]
    first_at = int(P[0])
    raw = bytes(view[first_at:p])
    tags, keys = tags_and_keys(raw, props_at - first_at, P + sizes - first_at)
    tag_codes = np.fromiter(map(tag_hash, tags), np.int64, len(tags))
    batch = ScannedBatch(base + P, sizes, get_be(u8, P + 12, 4), get_be(u8, P + 20, 8),
                         get_be(u8, P + 56, 8), tag_codes, topics, keys)
    return p, reason, detail, batch


def _careful(view: memoryview, pos: int, limit: int, base: int,
             seg_end: int) -> tuple[int, str, str, ScannedBatch]:
    msgs: list[ScannedMessage] = []
    stop, reason, detail = walk(view, pos, limit, base, seg_end, out=msgs)
    return stop, reason, detail, batch_from_messages(msgs)
