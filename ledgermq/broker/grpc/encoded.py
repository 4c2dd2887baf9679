"""The hottest responses serialized by hand: a stored message's SendMessageResponse, an
AckMessageResponse whose acks all held.

Building one as protobuf objects (a Status copied into an entry, the entry into the response)
costs more than the send's whole trip through the store; its wire form is a few fixed bytes
around the message id and the offset. The field numbers are apache.rocketmq.v2's
(definition.proto, service.proto); tests/broker/test_grpc_encoded.py holds these bytes to
protobuf's own serialization of the same response."""
from __future__ import annotations

from ...apis import definition_pb2 as pb

LEN, VARINT = 2, 0  # wire types


def varint(n: int) -> bytes:
    """A varint; a negative int64 as its 10-byte two's complement, as protobuf writes it."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _delimited(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field after its (encoded) tag: its length is one byte under 128,
    as most here are."""
    n = len(data)
    return tag + (bytes((n,)) if n < 0x80 else varint(n)) + data


def length_delimited(number: int, data: bytes) -> bytes:
    return _delimited(field(number, LEN), data)


_OK = field(1, VARINT) + varint(pb.OK) + length_delimited(2, b"OK")  # Status{code, message}
_OK_STATUS = length_delimited(1, _OK)  # as the Status field (1) of an entry or a response


_F1, _F2, _F3 = field(1, LEN), field(2, LEN), field(3, LEN)
_OFFSET = field(4, VARINT)
_ACK_OK = _delimited(_F3, _OK)  # an ack entry's Status field (3)


def sent(message_id: str, offset: int, transaction_id: str = "") -> bytes:
    """SendMessageResponse{status: OK, entries: [SendResultEntry{status: OK, message_id,
    transaction_id, offset}]} serialized (proto3: empty strings and a zero offset left
    out). (Written out flat: it runs once a gRPC send.)"""
    entry = _OK_STATUS
    if message_id:
        entry += _delimited(_F2, message_id.encode())
    if transaction_id:
        entry += _delimited(_F3, transaction_id.encode())
    if offset:
        entry += _OFFSET + (bytes((offset,)) if 0 < offset < 0x80 else varint(offset))
    return _OK_STATUS + _delimited(_F2, entry)


def acked(entries: list[tuple[str, str]]) -> bytes:
    """AckMessageResponse{status: OK, entries: [AckMessageResultEntry{message_id,
    receipt_handle, status: OK}]} for (message id, receipt handle) pairs."""
    out = [_OK_STATUS]
    for message_id, handle in entries:
        entry = (_delimited(_F1, message_id.encode()) if message_id else b"") + \
            (_delimited(_F2, handle.encode()) if handle else b"") + _ACK_OK
        out.append(_delimited(_F2, entry))
    return b"".join(out)
