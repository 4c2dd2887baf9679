"""Messages between RocketMQ 5's gRPC form and the stored form: system properties map to
RocketMQ's message properties (what a remoting client reads and writes), so the two kinds
of clients share topics both ways."""
from __future__ import annotations

import hashlib
import re

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ...apis import definition_pb2 as pb
from ...wire.message import (
    PROPERTY_KEYS, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_PRODUCER_GROUP, PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS, PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_KEY, StoredMessage,
)
from ..refusals import Kind, Refused

# RocketMQ's property names for what only RocketMQ 5 messages carry
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST = "__BORNHOST"  # ledgermq's: the client's own idea of its address
SYSTEM_PROPERTIES = {PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_MESSAGE_GROUP,
                     PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRANSACTION_PREPARED,
                     PROPERTY_PRODUCER_GROUP, PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID,
                     PROPERTY_TRACE_CONTEXT, PROPERTY_BORN_HOST, "REAL_TOPIC", "REAL_QID",
                     "TRANSACTION_CHECK_TIMES", "RECONSUME_TIME", "MAX_RECONSUME_TIMES",
                     "WAIT", "DELAY", "MSG_REGION", "TRACE_ON", "CLUSTER", "MIN_OFFSET",
                     "MAX_OFFSET", "POP_CK", "1ST_POP_TIME", "CORRECTION_FLAG"}
# RocketMQ's proxy limits (ProxyConfig's userPropertyMaxNum, maxUserPropertySize,
# maxMessageGroupSize): user properties, their bytes with the tag and keys, a group's bytes
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64


# the API's status for each kind of refusal (see broker/refusals.py)
GRPC_CODES: dict[Kind, pb.Code] = {
    Kind.BAD_REQUEST: pb.BAD_REQUEST,
    Kind.UNAUTHORIZED: pb.UNAUTHORIZED,
    Kind.CLIENT_ID_REQUIRED: pb.CLIENT_ID_REQUIRED,
    Kind.CLIENT_ID_TAKEN: pb.FORBIDDEN,
    Kind.TOPIC_NOT_FOUND: pb.TOPIC_NOT_FOUND,
    Kind.TOO_MANY: pb.TOO_MANY_REQUESTS,
    Kind.RECEIPT_HANDLE: pb.INVALID_RECEIPT_HANDLE,
    Kind.INVISIBLE_TIME: pb.ILLEGAL_INVISIBLE_TIME,
    Kind.MESSAGE_TAG: pb.ILLEGAL_MESSAGE_TAG,
    Kind.MESSAGE_KEY: pb.ILLEGAL_MESSAGE_KEY,
    Kind.MESSAGE_ID: pb.ILLEGAL_MESSAGE_ID,
    Kind.MESSAGE_GROUP: pb.ILLEGAL_MESSAGE_GROUP,
    Kind.PROPERTY_KEY: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Kind.PROPERTIES_TOO_LARGE: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    Kind.STORE_REFUSED: pb.INTERNAL_SERVER_ERROR,
}


def named(code: pb.Code, message: str) -> str:
    """A refusal's message as RocketMQ's proxy writes them: its code's name first."""
    return f"{pb.Code.Name(code)}: {message}"


def status(code: pb.Code, message: str = "OK") -> pb.Status:
    """A call's status; a refusal's message opens with its code's name, as RocketMQ's
    proxy writes them (clients show only the number, and scripts match the name)."""
    return pb.Status(code=code, message=message if code == pb.OK else named(code, message))


def refused_status(e: Refused) -> pb.Status:
    """The status answering a refusal: its kind's code (GRPC_CODES), its reason."""
    return status(GRPC_CODES[e.kind], str(e))


def transaction_group(topic: str) -> str:
    """The producer group a gRPC transactional message is checked back through: RocketMQ 5
    producers have no group, so the topic's publishers stand for one."""
    return f"%GRPC_PRODUCER%{topic}"


def properties_of(m: pb.Message) -> dict[str, str]:
    """The stored properties of a message a RocketMQ 5 producer sent; Refused for what
    RocketMQ refuses too (system property names used by the user, a tag with '|', ...)."""
    sp = m.system_properties
    if len(m.user_properties) > MAX_USER_PROPERTIES:
        raise Refused(Kind.PROPERTIES_TOO_LARGE, f"{len(m.user_properties)} user properties, "
                      f"at most {MAX_USER_PROPERTIES}")
    props: dict[str, str] = {}
    user_bytes = 0  # what RocketMQ's proxy counts: user keys and values, the tag, the keys
    for k, v in m.user_properties.items():
        if not k or k in SYSTEM_PROPERTIES:
            raise Refused(Kind.PROPERTY_KEY, f"property key {k!r} is reserved for the system")
        if has_control_character(k) or has_control_character(v):
            raise Refused(Kind.PROPERTY_KEY, f"property {k!r} holds a control character")
        user_bytes += len(k.encode()) + len(v.encode())
        props[k] = v
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag or has_control_character(sp.tag):
            raise Refused(Kind.MESSAGE_TAG, f"tag {sp.tag!r} is not allowed (empty, with '|' "
                          "or a control character)")
        user_bytes += len(sp.tag.encode())
        props[PROPERTY_TAGS] = sp.tag
    if sp.keys:
        if any(not k.strip() or " " in k or has_control_character(k) for k in sp.keys):
            raise Refused(Kind.MESSAGE_KEY, "a message key is empty or holds a space or a "
                          "control character")
        user_bytes += sum(len(k.encode()) for k in sp.keys)
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    if user_bytes > MAX_USER_PROPERTY_BYTES:
        raise Refused(Kind.PROPERTIES_TOO_LARGE, f"user properties, tag and keys are "
                      f"{user_bytes} B, at most {MAX_USER_PROPERTY_BYTES}")
    if not sp.message_id:
        raise Refused(Kind.MESSAGE_ID, "the message has no message_id")
    props[PROPERTY_UNIQ_KEY] = sp.message_id
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group.strip() or has_control_character(group):
            raise Refused(Kind.MESSAGE_GROUP, "the message group is empty or holds a control "
                          "character")
        if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
            raise Refused(Kind.MESSAGE_GROUP, f"the message group is {len(group.encode())} B, "
                          f"under {MAX_MESSAGE_GROUP_BYTES} B allowed")
        props[PROPERTY_MESSAGE_GROUP] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        props[PROPERTY_TIMER_DELIVER_MS] = str(to_ms(sp.delivery_timestamp))
    if sp.HasField("trace_context"):
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    if sp.born_host:
        props[PROPERTY_BORN_HOST] = sp.born_host
    if sp.message_type == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = transaction_group(m.topic.name)
        if sp.HasField("orphaned_transaction_recovery_duration"):
            d = sp.orphaned_transaction_recovery_duration
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(max(1, d.seconds))
    return props


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # ISO control characters


def has_control_character(text: str) -> bool:
    """What RocketMQ's proxy refuses in tags, keys, groups and properties (one C-level scan
    per field: every send's properties pass here)."""
    return _CONTROL.search(text) is not None


def md5_text(body: bytes) -> str:
    """A body's MD5 digest (pb.MD5) in upper-case hex, as RocketMQ's proxy sends it: the
    Java and Python clients check it byte for byte (their CRC32 strings differ: Java drops
    leading zeros, Python pads; a message whose digest string differs is discarded as
    corrupted)."""
    return hashlib.md5(body).hexdigest().upper()


def message_type_of(props: dict[str, str]) -> pb.MessageType:
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if PROPERTY_MESSAGE_GROUP in props:
        return pb.FIFO
    if PROPERTY_TIMER_DELIVER_MS in props or "DELAY" in props:
        return pb.DELAY
    return pb.NORMAL


def to_ms(ts: Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def host_text(packed: bytes) -> str:
    if len(packed) >= 8:
        return f"{'.'.join(str(b) for b in packed[:4])}:{int.from_bytes(packed[4:8], 'big')}"
    return ""


def to_grpc(m: StoredMessage, *, receipt_handle: str | None = None, attempt: int = 0,
            invisible_ms: int | None = None) -> pb.Message:
    """A stored message as a RocketMQ 5 consumer reads it (a redelivered one under its
    original topic, as RocketMQ's proxy shows it)."""
    out = pb.Message()
    to_grpc_into(out, m, receipt_handle=receipt_handle, attempt=attempt,
                 invisible_ms=invisible_ms)
    return out


def to_grpc_into(out: pb.Message, m: StoredMessage, *, receipt_handle: str | None = None,
                 attempt: int = 0, invisible_ms: int | None = None) -> None:
    """to_grpc into `out` (a response's own message: no copy). (Filled in place: a
    Timestamp or a Digest made apart and copied in costs twice as much, and a receive makes
    one a message.)"""
    props = m.properties
    out.body = m.body
    out.topic.name = props.get(PROPERTY_RETRY_TOPIC) or m.topic
    out.user_properties.update({k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES})
    sp = out.system_properties
    sp.message_id = props.get(PROPERTY_UNIQ_KEY) or m.msg_id
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = md5_text(m.body)
    sp.body_encoding = pb.IDENTITY
    sp.message_type = message_type_of(props)
    _set_ms(sp.born_timestamp, m.born_timestamp)
    sp.born_host = props.get(PROPERTY_BORN_HOST) or host_text(m.born_host)
    _set_ms(sp.store_timestamp, m.store_timestamp)
    sp.store_host = host_text(m.store_host)
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    if PROPERTY_TAGS in props:
        sp.tag = props[PROPERTY_TAGS]
    if props.get(PROPERTY_KEYS):
        sp.keys.extend(k for k in props[PROPERTY_KEYS].split(" ") if k)
    if PROPERTY_MESSAGE_GROUP in props:
        sp.message_group = props[PROPERTY_MESSAGE_GROUP]
    if PROPERTY_TIMER_DELIVER_MS in props:
        _set_ms(sp.delivery_timestamp, int(props[PROPERTY_TIMER_DELIVER_MS]))
    if PROPERTY_TRACE_CONTEXT in props:
        sp.trace_context = props[PROPERTY_TRACE_CONTEXT]
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
        sp.delivery_attempt = attempt
        _set_ms(sp.invisible_duration, invisible_ms or 0)


def _set_ms(field: Timestamp | Duration, ms: int) -> None:
    """A Timestamp or Duration field of `ms` milliseconds, set (assigning makes it present,
    even at zero)."""
    field.seconds, field.nanos = ms // 1000, (ms % 1000) * 1_000_000
