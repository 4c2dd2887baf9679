"""Turning send requests into store batches: headers (V1 and V2), batch bodies, delays,
retries and dead letters."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..wire.scan import index_keys_of
from ..wire.batch_body import split_batch
from ..wire.native import twin_or_fallback
from ..wire.message import (
    NAME_VALUE_SEPARATOR, PROPERTY_DEDUP, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC, PROPERTY_SEPARATOR, PROPERTY_TAGS, PROPERTY_UNIQ_KEY,
    decode_properties, encode_properties, property_value,
)
from .refusals import Kind, Refused

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

index_keys = index_keys_of  # (re-exported: the send path's name for it)

# SendMessageRequestHeaderV2 carries one-letter field names
_V2 = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
       "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
       "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
       "n": "brokerName"}


@dataclass
class SendHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool


def _int(ext: dict[str, str], key: str, default: int | None = None) -> int:
    raw = ext.get(key)
    if raw in (None, ""):
        if default is None:
            raise Refused(Kind.BAD_REQUEST, f"the send header lacks {key}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise Refused(Kind.BAD_REQUEST, f"{key}={raw!r} is not an integer") from None


def parse_send_header(ext: dict[str, str]) -> SendHeader:
    """The send header, its numbers within the widths the stored message gives them
    (Refused naming the field otherwise)."""
    h = _parse_v2(ext) if "b" in ext and "topic" not in ext else _parse_v1(ext)
    for name, value, bits in (("queueId", h.queue_id, 32), ("sysFlag", h.sys_flag, 32),
                              ("bornTimestamp", h.born_timestamp, 64), ("flag", h.flag, 32),
                              ("reconsumeTimes", h.reconsume_times, 32),
                              ("defaultTopicQueueNums", h.default_topic_queue_nums, 32),
                              ("maxReconsumeTimes", h.max_reconsume_times or 0, 32)):
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise Refused(Kind.BAD_REQUEST, f"{name}={value} does not fit in {bits} bits")
    return h


def _parse_v1(ext: dict[str, str]) -> SendHeader:
    topic = ext.get("topic")
    if not topic:
        raise Refused(Kind.BAD_REQUEST, "the send header lacks topic")
    max_re = ext.get("maxReconsumeTimes")
    return SendHeader(
        producer_group=ext.get("producerGroup", ""), topic=topic,
        default_topic=ext.get("defaultTopic", "TBW102"),
        default_topic_queue_nums=_int(ext, "defaultTopicQueueNums", 4),
        queue_id=_int(ext, "queueId", -1), sys_flag=_int(ext, "sysFlag", 0),
        born_timestamp=_int(ext, "bornTimestamp", 0), flag=_int(ext, "flag", 0),
        properties=ext.get("properties", "") or "",
        reconsume_times=_int(ext, "reconsumeTimes", 0),
        max_reconsume_times=int(max_re) if max_re not in (None, "") else None,
        batch=str(ext.get("batch", "false")).lower() in ("true", "1"))


def _parse_v2(ext: dict[str, str]) -> SendHeader:
    """SendMessageRequestHeaderV2 (one-letter names), read directly: it is on every send."""
    get = ext.get
    topic = get("b")
    if not topic:
        raise Refused(Kind.BAD_REQUEST, "the send header lacks topic")
    try:
        nums = [int(get(k) or default) for k, default in _V2_INTS]
    except ValueError:
        k = next(k for k, _ in _V2_INTS if not _is_int(get(k) or "0"))
        raise Refused(Kind.BAD_REQUEST, f"{_V2[k]}={get(k)!r} is not an integer") from None
    max_re = get("l")
    return SendHeader(get("a", ""), topic, get("c", "TBW102"), nums[0], nums[1], nums[2],
                      nums[3], nums[4], get("i") or "", nums[5],
                      int(max_re) if max_re else None, get("m", "false").lower() in ("true", "1"))


# V2 integer fields in SendHeader order, with their defaults
_V2_INTS = (("d", 4), ("e", -1), ("f", 0), ("g", 0), ("h", 0), ("j", 0))


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


@dataclass
class BatchBody:
    """The messages of a SEND_BATCH_MESSAGE body, as views into it (no copies)."""

    bodies: list[bytes]  # (memoryviews into the body, typed as the store takes them)
    props: list[bytes]
    flags: list[int]
    tags: list[str | None]
    index_keys: list[list[str]]


def split_batch_body(body: bytes, extra_props: bytes = b"") -> BatchBody:
    """Messages of a SEND_BATCH_MESSAGE body (wire.batch_body.split_batch), with
    `extra_props` appended to each one's properties."""
    bodies, props, flags, tags, keys = split_batch(body)
    if extra_props:  # (a client may end a message's properties without a separator)
        sep = PROPERTY_SEPARATOR.encode()
        joined = []
        for x in props:
            own = x.tobytes()  # (one copy, then bytes operations: not view slices)
            joined.append(own + extra_props if not own or own[-1:] == sep
                          else own + sep + extra_props)
        props = joined
    return BatchBody(bodies, props, flags, tags, keys)


def tags_of(props: bytes) -> str | None:
    return property_value(props, PROPERTY_TAGS)


def delay_level_of(props: bytes) -> int:
    raw = property_value(props, PROPERTY_DELAY_TIME_LEVEL)
    try:
        return int(raw) if raw else 0
    except ValueError:
        return 0


def with_properties(props: bytes, add: dict[str, str], drop: tuple[str, ...] = ()) -> bytes:
    """Properties with `add` set and `drop` removed (order of the rest kept)."""
    decoded = decode_properties(props)
    for k in drop:
        decoded.pop(k, None)
    decoded.update(add)
    return encode_properties(decoded)


def to_schedule(props: bytes, topic: str, queue_id: int) -> bytes:
    """Properties of a delayed message parked in the schedule topic."""
    return with_properties(props, {PROPERTY_REAL_TOPIC: topic, PROPERTY_REAL_QUEUE_ID: str(queue_id)})


# what only the broker writes into a message's properties: where a parked (delayed, timer,
# half) message really goes, when a timer is due, how often a half message was checked.
# From a client they could send a message anywhere (a forged REAL_QID grew a topic to a
# million queues), so a client's send never carries them.
BROKER_ONLY_PROPERTIES = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, "TIMER_OUT_MS",
                          "TRANSACTION_CHECK_TIMES")
_BROKER_ONLY_HINTS = (b"REAL_", b"TIMER_OUT_MS", b"TRANSACTION_CHECK_TIMES")


def without_broker_properties(props: bytes) -> bytes:
    """A client's properties without BROKER_ONLY_PROPERTIES (the common case, none of
    them: the bytes as they came, after one scan)."""
    if not may_hold_broker_properties(props):
        return props
    return with_properties(props, {}, drop=BROKER_ONLY_PROPERTIES)


def may_hold_broker_properties(*raw: bytes) -> bool:
    """Whether any of `raw` (a whole batch body, the header's properties) could hold a
    property only the broker sets: one scan of all the bytes, where a test per message
    cost a batch of 100 a fifth of its time. (A match may be a false alarm, inside a body
    or across two messages; each message is then looked at on its own.)"""
    return any(hint in r for r in raw for hint in _BROKER_ONLY_HINTS)


def props_from_header(text: str) -> bytes:
    """The header's properties string, normalized to end each pair with the separator."""
    if text and not text.endswith(PROPERTY_SEPARATOR) and NAME_VALUE_SEPARATOR in text:
        text += PROPERTY_SEPARATOR
    return text.encode()


def wants_dedup(props: bytes | memoryview) -> bool:
    return property_value(bytes(props), PROPERTY_DEDUP) == "1"


def drop_stored(batch: BatchBody, stored: Callable[[str], bool],
                maybe_stored: Callable[[list[str]], npt.NDArray[np.bool_]]) -> int:
    """Remove from `batch` every message whose UNIQ_KEY `stored(key)` says is in the log
    already (a retried idempotent send); `maybe_stored(keys)` first rules out, all at once,
    the keys that cannot be there. Returns how many were dropped."""
    uniq = [property_value(bytes(p), PROPERTY_UNIQ_KEY) or "" for p in batch.props]
    maybe = maybe_stored(uniq)
    keep = [i for i, key in enumerate(uniq) if not (key and maybe[i] and stored(key))]
    dropped = len(batch.bodies) - len(keep)
    if dropped:
        for name in ("bodies", "props", "flags", "tags", "index_keys"):
            col = getattr(batch, name)
            setattr(batch, name, [col[i] for i in keep])
    return dropped



# What a send's properties hold that the send path must look at further (read_send's marks)
MARK_BROKER_ONLY = 1  # a hint of BROKER_ONLY_PROPERTIES: strip them before storing
MARK_DEDUP = 2  # LMQ_DEDUP=1: an idempotent send
MARK_TIMER = 4  # a TIMER_ property: maybe a timer message
MARK_ZERO_END = 8  # ends with a zero byte (refused: recovery would read a torn write)


def scan_send_properties(props: bytes) -> tuple[str | None, list[str], int, int]:
    """(TAGS, index keys, marks, delay level) of a one-message send's properties."""
    marks = (MARK_BROKER_ONLY if may_hold_broker_properties(props) else 0) \
        | (MARK_DEDUP if wants_dedup(props) else 0) \
        | (MARK_TIMER if b"TIMER_" in props else 0) \
        | (MARK_ZERO_END if props[-1:] == b"\0" else 0)
    return tags_of(props), index_keys(props), marks, delay_level_of(props)


# read_send's answer (see there)
SendFields = tuple[str, str, int, int, int, int, int, int, "int | None", bool, bytes,
                   "str | None", list[str], int, int]


@twin_or_fallback("read_send")
def read_send(ext: dict[str, str]) -> SendFields:
    """Everything the send path reads from a send request's header, in one call:
    (topic, defaultTopic, defaultTopicQueueNums, queueId, sysFlag, bornTimestamp, flag,
    reconsumeTimes, maxReconsumeTimes or None, batch, properties as bytes, then
    scan_send_properties of them). Refused naming the field when the header is bad.
    (The compiled twin reads the usual header; anything else it leaves to this one.)"""
    h = parse_send_header(ext)
    props = props_from_header(h.properties)
    return (h.topic, h.default_topic, h.default_topic_queue_nums, h.queue_id, h.sys_flag,
            h.born_timestamp, h.flag, h.reconsume_times, h.max_reconsume_times, h.batch,
            props, *scan_send_properties(props))
