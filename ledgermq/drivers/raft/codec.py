"""Raft messages between peers as remoting commands (code RAFT_MESSAGE): the fields in the
header's extFields, entries packed in the body."""
from __future__ import annotations

import struct
from dataclasses import fields

import orjson

from ...remoting import RemotingCommand
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


# field names per message type (dataclasses.fields costs more than the encoding itself)
_FIELDS = {name: tuple(f.name for f in fields(cls)) for name, cls in _TYPES.items()}


def encode_message(msg) -> RemotingCommand:
    """Each field as JSON text in extFields (orjson: a push is on every replicated send)."""
    name = type(msg).__name__
    ext, body = {"t": name}, b""
    for f in _FIELDS[name]:
        v = getattr(msg, f)
        if f == "entries":
            body = _entries_body(v)
        elif isinstance(v, (PushType, Code)):
            ext[f] = v.value
        else:
            ext[f] = orjson.dumps(v).decode()
    return RemotingCommand(RAFT_MESSAGE, ext=ext, body=body)


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
    name = cmd.ext["t"]
    cls = _TYPES[name]
    kw = {}
    for f in _FIELDS[name]:
        if f == "entries":
            entries, mv, pos = [], memoryview(cmd.body), 0
            while pos < len(mv):
                index, term, n = _ENTRY.unpack_from(mv, pos)
                pos += _ENTRY.size
                entries.append(Entry(index, term, bytes(mv[pos:pos + n])))
                pos += n
            kw["entries"] = tuple(entries)
        elif f == "kind":
            kw["kind"] = PushType(cmd.ext["kind"])
        elif f == "code":
            kw["code"] = Code(cmd.ext["code"])
        elif f in cmd.ext:
            kw[f] = orjson.loads(cmd.ext[f])
    return cls(**kw)
