"""Raft messages between peers as remoting commands (code RAFT_MESSAGE): the fields in the
header's extFields, entries packed in the body."""
from __future__ import annotations

import struct
from dataclasses import fields

import orjson

from ...remoting import RemotingCommand, SerializeType
from ...replication.raft import (
    Code, Entry, Push, PushResponse, PushType, TimeoutNow, VoteRequest, VoteResponse,
)

RAFT_MESSAGE = 9901  # request code of raft messages between peers (their own port)
_TYPES = {c.__name__: c for c in (VoteRequest, VoteResponse, Push, PushResponse, TimeoutNow)}
_ENTRY = struct.Struct(">qqi")


def parse_peers(text: str, key: str = "dLegerPeers") -> dict[str, str]:
    """'n0-127.0.0.1:40911;n1-127.0.0.1:40912' -> {'n0': '127.0.0.1:40911', ...}"""
    peers = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        node, sep, addr = item.partition("-")
        if not sep or ":" not in addr:
            raise ValueError(f"{key} item {item!r} is not id-host:port")
        peers[node] = addr
    if len(peers) < 1:
        raise ValueError(f"{key} is empty")
    return peers


# How each field travels in extFields: as its JSON text (an int's is its decimal form),
# enums as their value; a push's entries go in the body. Worked out once per type
# (dataclasses.fields costs more than the encoding itself).
_INT, _BOOL, _JSON, _KIND, _CODE, _ENTRIES = range(6)
_BY_TYPE = {"int": _INT, "bool": _BOOL, "PushType": _KIND, "Code": _CODE}
_LAYOUT = {name: tuple((f.name, _ENTRIES if f.name == "entries" else _BY_TYPE.get(f.type, _JSON))
                       for f in fields(cls))
           for name, cls in _TYPES.items()}
_PUSH_TYPES = {t.value: t for t in PushType}
_CODES = {c.value: c for c in Code}


def encode_message(msg) -> RemotingCommand:
    """Each field as JSON text in extFields (a push is on every replicated send)."""
    name = type(msg).__name__
    ext, body = {"t": name}, b""
    for f, kind in _LAYOUT[name]:
        v = getattr(msg, f)
        if kind == _INT and type(v) is int:
            ext[f] = str(v)
        elif kind == _KIND or kind == _CODE:
            ext[f] = v.value
        elif kind == _ENTRIES:
            body = _entries_body(v)
        else:
            ext[f] = orjson.dumps(v).decode()
    # the binary header: cheaper both ways than JSON, and read by every version's remoting
    return RemotingCommand(RAFT_MESSAGE, ext=ext, body=body,
                           serialize_type=SerializeType.ROCKETMQ)


def _entries_body(entries) -> list:
    """Each entry's header, then its data: views on the commit log stay views (a LogSpan's
    buffers), so the push goes out by writev without copying message bytes."""
    body: list = []
    for e in entries:
        body.append(_ENTRY.pack(e.index, e.term, len(e.data)))
        data = e.data
        if isinstance(data, (bytes, memoryview)):
            body.append(data)
        else:
            body += data.buffers()
    return body


def decode_message(cmd: RemotingCommand):
    """The message of a RAFT_MESSAGE; KeyError, ValueError or TypeError when it is not one
    (an integer field must be a JSON integer, an enum one of its values)."""
    ext = cmd.ext
    name = ext["t"]
    kw = {}
    for f, kind in _LAYOUT[name]:
        if kind == _ENTRIES:
            kw[f] = _entries(memoryview(cmd.body))
            continue
        text = ext.get(f)
        if text is None:  # (a field with a default may be left out)
            continue
        if kind == _INT or kind == _BOOL:
            kw[f] = _typed(text, int if kind == _INT else bool)
        elif kind == _KIND:
            kw[f] = _PUSH_TYPES[text]
        elif kind == _CODE:
            kw[f] = _CODES[text]
        else:
            kw[f] = orjson.loads(text)
    return _TYPES[name](**kw)


def _typed(text: str, kind: type) -> int:
    value = orjson.loads(text)
    if type(value) is not kind:  # (a bool is not taken for an int, nor 1 for True)
        raise ValueError(f"{text!r} is not {kind.__name__}")
    return value


def _entries(mv: memoryview) -> tuple[Entry, ...]:
    entries, pos = [], 0
    while pos < len(mv):
        index, term, n = _ENTRY.unpack_from(mv, pos)
        pos += _ENTRY.size
        entries.append(Entry(index, term, bytes(mv[pos:pos + n])))
        pos += n
    return tuple(entries)
