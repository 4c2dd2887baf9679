"""What a control node must not forget, on disk: per broker group a small state file
(replaced atomically, fsynced) and the message cache (an append-only file of records,
fsynced before the master is told "cached"; rewritten when entries are dropped)."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from ..replication.checkpoint import Cached, GroupState
from ..runtime.files import replace_file

_REC = struct.Struct(">qqii")  # offset, end, id length, data length


def encode_cached(entries) -> bytes:
    out = []
    for c in entries:
        mid = c.msg_id.encode()
        out.append(_REC.pack(c.offset, c.end, len(mid), len(c.data)) + mid + c.data)
    return b"".join(out)


def decode_cached(raw: bytes) -> list[Cached]:
    """Records up to the first incomplete one (a torn tail after a crash is ignored)."""
    out, pos = [], 0
    while pos + _REC.size <= len(raw):
        offset, end, nid, ndata = _REC.unpack_from(raw, pos)
        stop = pos + _REC.size + nid + ndata
        if stop > len(raw):
            break
        mid = raw[pos + _REC.size:pos + _REC.size + nid].decode()
        out.append(Cached(offset, end, mid, raw[pos + _REC.size + nid:stop]))
        pos = stop
    return out


class GroupFiles:
    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.dir / "state.json"
        self.cache_path = self.dir / "cache.log"
        self._cache = open(self.cache_path, "ab")

    def load(self) -> tuple[GroupState | None, list[Cached]]:
        state = None
        if self.state_path.exists():
            state = GroupState.from_json(json.loads(self.state_path.read_text()))
        return state, decode_cached(self.cache_path.read_bytes())

    def save_state(self, state: dict) -> None:
        replace_file(self.state_path, json.dumps(state).encode())

    def append(self, entry: Cached) -> None:
        self._cache.write(encode_cached([entry]))
        self._cache.flush()
        os.fsync(self._cache.fileno())

    def rewrite(self, entries: list[Cached]) -> None:
        self._cache.close()
        replace_file(self.cache_path, encode_cached(entries))
        self._cache = open(self.cache_path, "ab")

    def close(self) -> None:
        self._cache.close()
