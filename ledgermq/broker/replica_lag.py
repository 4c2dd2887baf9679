"""How far behind each replica is, as the master or leader sees it, computed at scrape
time: in bytes (its log end minus the offset the replica acknowledged) and in seconds (the
age of the oldest message the replica lacks: now minus the store timestamp of the message
holding its offset; 0 when it has everything).

A replica's offset need not be a message boundary (HA transfers are byte ranges) and the
commit log has no index by offset. So, while metrics are served, the broker notes where its
log ends every SAMPLE_S (always a boundary); the message holding an offset is found by
stepping over message sizes from the last noted end below it (about one sampling period of
messages), or from the start of its segment beyond the notes' window. After MAX_STEPS it
stops and takes the last message reached: an older one, so the age is never understated.
"""
from __future__ import annotations

import asyncio
import struct
import time
from bisect import bisect_right
from typing import TYPE_CHECKING

from ..store import MessageStore, StoreError
from ..wire.message import BLANK_MAGIC_CODE

if TYPE_CHECKING:
    from .modes.protocol import Metric

SAMPLE_S = 0.1
MAX_SAMPLES = 8192  # past this, every other note is dropped: a longer, coarser window
MAX_STEPS = 100_000
_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGICCODE


class LogBoundaries:
    """Where the commit log ended, noted over time (increasing offsets)."""

    def __init__(self, store: MessageStore):
        self.store = store
        self.ends: list[int] = []

    def sample(self) -> None:
        end, ends = self.store.commitlog.max_offset, self.ends
        if ends and end < ends[-1]:  # cut back (a slave's rollback): forget what was past it
            del ends[bisect_right(ends, end):]
        if not ends or ends[-1] != end:
            ends.append(end)
        if len(ends) > MAX_SAMPLES:
            ends[:] = ends[::-2][::-1]  # thinned, the newest kept

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_S)

    def message_at(self, offset: int) -> int | None:
        """Start of the message holding byte `offset` of the log (see the module doc), or
        None if the log does not hold it."""
        log = self.store.commitlog
        seg = log.files.find(offset) if offset < log.max_offset else None
        if seg is None:
            return None
        k = bisect_right(self.ends, offset) - 1
        for pos in dict.fromkeys((max(self.ends[k] if k >= 0 else 0, seg.start), seg.start)):
            for _ in range(MAX_STEPS):
                size, magic = _HEAD.unpack_from(seg.view, pos - seg.start)
                if magic == BLANK_MAGIC_CODE:  # the segment's unused tail: next segment's first
                    return seg.end if seg.end < log.max_offset else None
                if size <= 0 or pos + size > seg.end:
                    break  # not a boundary after all (the log was cut and rewritten): retry
                if pos + size > offset:
                    return pos
                pos += size
            else:
                return pos
        return None

    def age_s(self, offset: int) -> float:
        """Seconds since the oldest message at or past `offset` was stored (0: none; NaN:
        its segment was deleted by retention while being read)."""
        store = self.store
        try:
            pos = self.message_at(max(offset, store.commitlog.min_offset))
            stored_ms = store.store_timestamp_at(pos) if pos is not None else None
        except (StoreError, ValueError):  # (a released segment's view raises ValueError)
            return float("nan")
        return 0.0 if stored_ms is None else max(0.0, time.time() - stored_ms / 1000)


def lag_rows(bounds: LogBoundaries, offsets: dict[str, int]) -> list[Metric]:
    """Mode-style metric rows (name, help, labels, value) for each replica's offset."""
    end = bounds.store.commitlog.max_offset
    rows: list[Metric] = []
    for replica, offset in sorted(offsets.items()):
        behind = max(0, end - offset)
        rows.append(("ledgermq_replica_lag_bytes", "Bytes of this broker's log a replica "
                     "has not acknowledged.", {"replica": replica}, behind))
        rows.append(("ledgermq_replica_lag_seconds", "Age of the oldest message a replica "
                     "has not acknowledged (0: it has everything).", {"replica": replica},
                     bounds.age_s(offset) if behind else 0.0))
    return rows
