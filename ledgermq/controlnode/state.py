"""What a replicated control node's Raft log holds, and the state it adds up to.

Every change a control node must not forget (a group's state, a cached message, the
cache rewritten) is one log entry; every node applies committed entries in order, so a
follower holds what the leader had saved and can take over. A snapshot entry carries
the whole state: the log is compacted up to the latest one, so it stays small, and a
follower too far behind restarts its log from it (raft's RESET_LOG sends the leader's
first entry, which is then always a snapshot)."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from ..replication.checkpoint import Cached
from .persist import decode_cached, encode_cached

STATE, CACHE, REWRITE, SNAPSHOT, BARRIER = b"S", b"C", b"R", b"P", b"B"
_NAME = struct.Struct(">H")
_PART = struct.Struct(">HIQ")  # group name, state JSON and cache record lengths


@dataclass
class SavedGroup:
    state: dict | None = None  # GroupState.to_json(), None before its first save
    cache: list[Cached] = field(default_factory=list)


def _named(tag: bytes, group: str, payload: bytes) -> bytes:
    name = group.encode()
    return tag + _NAME.pack(len(name)) + name + payload


def state_entry(group: str, state: dict) -> bytes:
    return _named(STATE, group, json.dumps(state).encode())


def cache_entry(group: str, entry: Cached) -> bytes:
    return _named(CACHE, group, encode_cached([entry]))


def rewrite_entry(group: str, entries: list[Cached]) -> bytes:
    return _named(REWRITE, group, encode_cached(entries))


def snapshot_entry(groups: dict[str, SavedGroup]) -> bytes:
    out = [SNAPSHOT]
    for name, g in sorted(groups.items()):
        n, s, c = name.encode(), json.dumps(g.state).encode(), encode_cached(g.cache)
        out += [_PART.pack(len(n), len(s), len(c)), n, s, c]
    return b"".join(out)


def _decode_snapshot(data: bytes) -> dict[str, SavedGroup]:
    groups, pos = {}, 1
    while pos < len(data):
        nn, ns, nc = _PART.unpack_from(data, pos)
        pos += _PART.size
        name = data[pos:pos + nn].decode()
        state = json.loads(data[pos + nn:pos + nn + ns])
        cache = decode_cached(data[pos + nn + ns:pos + nn + ns + nc])
        pos += nn + ns + nc
        groups[name] = SavedGroup(state, cache)
    return groups


class ControlState:
    """The applied state: per broker group, its saved GroupState and message cache."""

    def __init__(self) -> None:
        self.groups: dict[str, SavedGroup] = {}
        self.entries_since_snapshot = 0
        self.bytes_since_snapshot = 0

    def apply(self, data: bytes) -> bool:
        """Apply one committed entry; True for a snapshot (earlier entries are redundant)."""
        tag = data[:1]
        if tag == SNAPSHOT:
            self.groups = _decode_snapshot(data)
            self.entries_since_snapshot = self.bytes_since_snapshot = 0
            return True
        self.entries_since_snapshot += 1
        self.bytes_since_snapshot += len(data)
        if tag in (b"", BARRIER):
            return False  # a new leader's own entry: nothing to apply
        (n,) = _NAME.unpack_from(data, 1)
        name = data[3:3 + n].decode()
        payload = data[3 + n:]
        g = self.groups.setdefault(name, SavedGroup())
        if tag == STATE:
            g.state = json.loads(payload)
        elif tag == CACHE:
            g.cache += decode_cached(payload)
        elif tag == REWRITE:
            g.cache = decode_cached(payload)
        else:
            raise ValueError(f"unknown control-node log entry {tag!r}")
        return False

    def snapshot(self) -> bytes:
        return snapshot_entry(self.groups)
