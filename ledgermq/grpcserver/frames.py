"""HTTP/2 frames (RFC 9113 §4, §6) as a gRPC server reads and writes them: the 9-byte frame
header, the frame types and flags it acts on, and builders for the frames it sends."""
from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADER_LEN = 9

# frame types
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)

# flags
END_STREAM = 0x1
ACK = 0x1  # SETTINGS and PING
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# error codes (§7)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, \
    STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = range(10)
ENHANCE_YOUR_CALM = 0xB

# settings (§6.5.2)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, \
    MAX_HEADER_LIST_SIZE = range(1, 7)

DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_SIZE = 16_384  # what a peer takes until it says more
MAX_WINDOW = 2 ** 31 - 1
MAX_FRAME_SIZE_LIMIT = 2 ** 24 - 1

_HEAD = struct.Struct(">BHBBI")
_U32 = struct.Struct(">I")
_SETTING = struct.Struct(">HI")


class ConnectionError_(Exception):
    """The peer broke the protocol for the whole connection: answered with GOAWAY(code)."""

    def __init__(self, code: int, why: str):
        super().__init__(why)
        self.code = code


def frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    n = len(payload)
    return _HEAD.pack(n >> 16, n & 0xFFFF, kind, flags, stream_id) + payload


def unary_answer(stream_id: int, opening: bytes, message: bytes, closing: bytes) -> bytes:
    """A unary call's whole answer: HEADERS (`opening`), DATA (the message with its 5-byte
    prefix), HEADERS ending the stream (`closing`: the trailers), in one piece."""
    n = len(message) + 5
    return b"".join((
        _HEAD.pack(0, len(opening), HEADERS, END_HEADERS, stream_id), opening,
        _HEAD.pack(n >> 16, n & 0xFFFF, DATA, 0, stream_id), b"\x00",
        _U32.pack(n - 5), message,
        _HEAD.pack(0, len(closing), HEADERS, END_HEADERS | END_STREAM, stream_id), closing))


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(k, v) for k, v in values.items()))


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise ConnectionError_(FRAME_SIZE_ERROR, "SETTINGS length is not a multiple of 6")
    return [_SETTING.unpack_from(payload, i) for i in range(0, len(payload), 6)]


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, _U32.pack(code))


def goaway(last_stream_id: int, code: int, why: str = "") -> bytes:
    return frame(GOAWAY, 0, 0, _U32.pack(last_stream_id) + _U32.pack(code) +
                 why.encode()[:256])


def u32(payload: bytes, at: int = 0) -> int:
    value: int = _U32.unpack_from(payload, at)[0]
    return value


def unpadded(flags: int, payload: bytes) -> bytes:
    """A DATA or HEADERS payload without its padding (and HEADERS' priority fields are the
    caller's: see `header_block`)."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ConnectionError_(PROTOCOL_ERROR, "padding as long as the frame")
    return payload[1:len(payload) - payload[0]]


def header_block(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's fragment of the header block."""
    block = unpadded(flags, payload)
    if flags & PRIORITY_FLAG:
        if len(block) < 5:
            raise ConnectionError_(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
        block = block[5:]
    return block
