"""RocketMQ's remoting frame.

    4 bytes  length of everything after this field (header-length word + header + body)
    4 bytes  serialization type (high byte: 0 JSON, 1 ROCKETMQ binary) | header length (24 bits)
    header   {code, language, version, opaque, flag, remark, extFields}
    body     the rest

The binary (ROCKETMQ) header is: code i16, language u8, version i16, opaque i32, flag i32,
remark (i32 length + UTF-8), extFields (i32 total length, then per field i16 key length +
key + i32 value length + value). Responses go back in the caller's serialization type.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import orjson  # headers are on every request: json's pure-Python paths cost ~20 µs each way

from ..wire import native
from ..wire.native import twin_or_fallback
from .codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType

MAX_FRAME_DEFAULT = 16 * 1024 * 1024
_LEN = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hBhii")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1  # RocketMQ's header numbers are Java ints


class FrameError(ValueError):
    """Bytes that are not a valid remoting frame; the connection cannot continue."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes | memoryview | list = b""  # a list of buffers is sent without joining
    language: str = "PYTHON"
    version: int = 317  # V4_9_4: recent enough for every request we send
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(self, code: int, remark: str | None = None, ext: dict | None = None,
                 body: bytes | memoryview | list = b"") -> "RemotingCommand":
        """A response to this request, in the request's serialization type."""
        # (positional: half a keyword call's cost, and every request gets one)
        return RemotingCommand(int(code), self.opaque, FLAG_RESPONSE, remark, ext or {}, body,
                               "JAVA", self.version, self.serialize_type)

    # ---- encoding -------------------------------------------------------------------
    def encode(self) -> list:
        """The frame as a list of buffers (the body is not copied)."""
        body = self.body
        bodies = body if type(body) is list else [body] if body else []
        head = encode_head(self.serialize_type, self.code, self.language, self.version,
                           self.opaque, self.flag, self.remark, self.ext,
                           sum(map(len, bodies)))
        return [head, *bodies]

    def to_bytes(self) -> bytes:
        return b"".join(bytes(b) if isinstance(b, memoryview) else b for b in self.encode())


@twin_or_fallback("encode_head")
def encode_head(stype: int, code: int, language: str, version: int, opaque: int, flag: int,
                remark: str | None, ext: dict[str, str], body_len: int) -> bytes:
    """A frame's length prefix and header, for a body of `body_len` bytes: the header in
    the serialization `stype` names (JSON unless ROCKETMQ). (Its compiled twin writes the
    usual header; anything else, a value that is not a str or a number past its width,
    it leaves to this one.)"""
    if stype == SerializeType.ROCKETMQ:
        header = _binary_header(code, language, version, opaque, flag, remark, ext)
    else:
        header = _json_header(code, language, version, opaque, flag, remark, ext)
    return _PREFIX.pack(4 + len(header) + body_len, (int(stype) << 24) | len(header)) + header


def _json_header(code: int, language: str, version: int, opaque: int, flag: int,
                 remark: str | None, ext: dict[str, str]) -> bytes:
    doc = {"code": code, "language": language, "version": version, "opaque": opaque,
           "flag": flag, "serializeTypeCurrentRPC": "JSON"}
    if remark is not None:
        doc["remark"] = remark
    if ext:
        for v in ext.values():
            if type(v) is not str:  # (values are mostly strings already)
                ext = {k: str(v) for k, v in ext.items() if v is not None}
                break
        doc["extFields"] = ext
    return orjson.dumps(doc)


def _binary_header(code: int, language: str, version: int, opaque: int, flag: int,
                   remark: str | None, ext: dict[str, str]) -> bytes:
    try:
        lang = LanguageCode[language].value
    except KeyError:
        lang = LanguageCode.OTHER.value
    remark_raw = remark.encode() if remark else b""
    parts = [_BIN_FIXED.pack(code, lang, version, opaque, flag), _LEN.pack(len(remark_raw)),
             remark_raw]
    fields = []
    for k, v in ext.items():
        if v is None:
            continue
        kb, vb = k.encode(), str(v).encode()
        fields.append(struct.pack(">h", len(kb)) + kb + _LEN.pack(len(vb)) + vb)
    ext_raw = b"".join(fields)
    parts += [_LEN.pack(len(ext_raw)), ext_raw]
    return b"".join(parts)


def decode_frame(frame: memoryview | bytes) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix."""
    if type(frame) is not memoryview:
        frame = memoryview(frame)
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes is too short")
    word = _LEN.unpack_from(frame, 0)[0]
    stype, hlen = (word >> 24) & 0xFF, word & 0xFFFFFF
    if hlen > len(frame) - 4:
        raise FrameError(f"header length {hlen} exceeds the frame ({len(frame) - 4} bytes)")
    if stype == SerializeType.JSON:
        code, language, version, opaque, flag, remark, ext = \
            json_header_fields(frame[4:4 + hlen])
        return RemotingCommand(code, opaque, flag, remark, ext, bytes(frame[4 + hlen:]),
                               language, version, SerializeType.JSON)
    if stype == SerializeType.ROCKETMQ:
        code, lang, version, opaque, flag, remark, ext = \
            binary_header_fields(frame[4:4 + hlen])
        return RemotingCommand(code, opaque, flag, remark, ext, bytes(frame[4 + hlen:]),
                               _LANGUAGE_NAMES.get(lang, "OTHER"), version,
                               SerializeType.ROCKETMQ)
    raise FrameError(f"unknown serialization type {stype}")


@twin_or_fallback("json_header_fields")
def json_header_fields(raw: memoryview | bytes
                       ) -> tuple[int, str, int, int, int, str | None, dict[str, str]]:
    """(code, language, version, opaque, flag, remark, extFields) of a JSON header, read
    as RocketMQ's Java side reads it; FrameError saying what is wrong with a bad one. (The
    compiled twin reads the usual headers, strings and integers, and leaves the rest here.)"""
    try:
        doc = orjson.loads(raw)  # RocketMQ's headers are UTF-8
    except orjson.JSONDecodeError as e:
        raise FrameError(f"header is not valid JSON: {e}") from None
    if type(doc) is not dict:
        raise FrameError("JSON header is not an object")
    get = doc.get
    code, opaque, flag, version = get("code"), get("opaque", 0), get("flag", 0), get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and
            type(version) is int):  # (clients send numbers; other forms are read as Java would)
        code, opaque, flag, version = _header_numbers(code, opaque, flag, version)
    if not (_INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= opaque <= _INT32_MAX and
            _INT32_MIN <= flag <= _INT32_MAX and _INT32_MIN <= version <= _INT32_MAX):
        raise FrameError("JSON header's code/opaque/flag/version are not 32-bit integers")
    ext = get("extFields") or {}
    if type(ext) is not dict:
        raise FrameError("extFields is not an object")
    for v in ext.values():
        if type(v) is not str:  # the usual case: every value a string already
            ext = {k: "" if v is None else (v if isinstance(v, str) else orjson.dumps(v).decode()
                                            if isinstance(v, (dict, list)) else str(v))
                   for k, v in ext.items()}
            break
    language = get("language", "OTHER")
    if type(language) is not str:
        language = _LANGUAGE_NAMES.get(language, "OTHER") if isinstance(language, int) \
            else str(language)
    remark = get("remark")
    return (code, language, version, opaque, flag, None if remark is None else str(remark),
            ext)


def _header_numbers(*values: object) -> list[int]:
    try:
        return [int(v) for v in values]  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        raise FrameError("JSON header lacks a numeric code/opaque/flag") from None


_LANGUAGE_NAMES = {m.value: m.name for m in LanguageCode}
if native._native is not None:  # what the compiled frames_in builds, as decode_frame does
    native._native.frame_init(RemotingCommand, SerializeType.JSON, SerializeType.ROCKETMQ,
                              _LANGUAGE_NAMES)


@twin_or_fallback("binary_header_fields")
def binary_header_fields(raw: memoryview | bytes
                         ) -> tuple[int, int, int, int, int, str | None, dict[str, str]]:
    """(code, language code, version, opaque, flag, remark, extFields) of a binary header;
    FrameError saying what is wrong with a malformed one."""
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
        p = _BIN_FIXED.size
        rlen = _LEN.unpack_from(raw, p)[0]
        p += 4
        if rlen < 0 or p + rlen > len(raw):
            raise FrameError(f"remark length {rlen} runs past the header")
        remark = bytes(raw[p:p + rlen]).decode("utf-8", "replace") if rlen else None
        p += rlen
        elen = _LEN.unpack_from(raw, p)[0]
        p += 4
        if elen < 0 or p + elen > len(raw):
            raise FrameError(f"extFields length {elen} runs past the header")
        end = p + elen
        ext: dict[str, str] = {}
        while p < end:
            klen = struct.unpack_from(">h", raw, p)[0]
            p += 2
            if klen < 0 or p + klen > end:
                raise FrameError("extFields key runs past the header")
            key = bytes(raw[p:p + klen]).decode("utf-8", "replace")
            p += klen
            vlen = _LEN.unpack_from(raw, p)[0]
            p += 4
            if vlen < 0 or p + vlen > end:
                raise FrameError("extFields value runs past the header")
            ext[key] = bytes(raw[p:p + vlen]).decode("utf-8", "replace")
            p += vlen
    except struct.error:
        raise FrameError("binary header is truncated") from None
    return code, lang, version, opaque, flag, remark, ext


@twin_or_fallback("frames_in")
def frames_in(buf: bytes | bytearray, max_frame: int) -> tuple[list[RemotingCommand], int]:
    """The whole frames at the start of `buf`, decoded, and the bytes they take; FrameError
    on a length outside [4, max_frame] or a frame that does not decode. (Commands keep
    no view of `buf`: decode_frame copies what it keeps.)"""
    out: list[RemotingCommand] = []
    pos, end = 0, len(buf)
    with memoryview(buf) as view:
        while end - pos >= 4:
            length = _LEN.unpack_from(buf, pos)[0]
            if length < 4 or length > max_frame:
                tls = " (a TLS handshake: this port does not serve TLS, see " \
                    "tls.server.mode)" if buf[pos] == 0x16 else ""
                raise FrameError(f"frame length {length} is outside [4, {max_frame}]{tls}")
            if end - pos - 4 < length:
                break
            out.append(decode_frame(view[pos + 4:pos + 4 + length]))
            pos += 4 + length
    return out, pos


class FrameSplitter:
    """Cuts a byte stream into frames; raises FrameError on a length it cannot accept."""

    def __init__(self, max_frame: int = MAX_FRAME_DEFAULT):
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[RemotingCommand]:
        # a read usually ends on a frame's end: then it is cut where it lies, not copied
        # into the buffer first (decode_frame copies what it keeps, so views die here)
        if self._buf:
            self._buf += data
            buf: bytes | bytearray = self._buf
        else:
            buf = data
        out, pos = frames_in(buf, self.max_frame)
        end = len(buf)
        if buf is data:
            if pos < end:
                self._buf += memoryview(data)[pos:]
        elif pos:
            del self._buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)
