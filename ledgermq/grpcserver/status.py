"""gRPC status codes and the trailers that carry them (the gRPC over HTTP/2 spec:
grpc-status, and grpc-message percent-encoded)."""
from __future__ import annotations

import enum


class Code(enum.IntEnum):
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class GrpcError(Exception):
    """Ends a call with `code` and a message for the client."""

    def __init__(self, code: Code, message: str):
        super().__init__(message)
        self.code, self.message = code, message


OK_TRAILERS = b"\x00\x0bgrpc-status\x010"
# ":status 200" (static index 8) and content-type, for a response that is trailers only
OPENING_HEADERS = b"\x88\x00\x0ccontent-type\x10application/grpc"


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field, new name, not indexed (leaves the peer's table as it
    is, so these bytes need no per-connection encoder)."""
    return b"\x00" + _length(name) + name + _length(value) + value


def _length(s: bytes) -> bytes:
    """HPACK's 7-bit prefix integer (no Huffman coding)."""
    n = len(s)
    if n < 127:
        return bytes((n,))
    out = bytearray((127,))
    n -= 127
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def percent_encoded(message: str) -> bytes:
    """grpc-message: UTF-8, every byte outside printable ASCII (and '%') as %XX."""
    return b"".join(bytes((b,)) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b
                    for b in message.encode())


def trailers(code: int, message: str = "", with_headers: bool = False) -> bytes:
    """The header block ending a call (with the opening headers for trailers-only)."""
    if code == 0 and not message:
        block = OK_TRAILERS
    else:
        block = _literal(b"grpc-status", str(int(code)).encode())
        if message:
            block += _literal(b"grpc-message", percent_encoded(message[:1024]))
    return OPENING_HEADERS + block if with_headers else block
