"""The I/O of a recovering classic-HA master's refill (replication/ha/refill.py): the
slave streams its log back, the master learns whether it ever had slaves; and the fork
check both ends make with the tail digest (replication/ha/actions.py).

Wire (slave -> master, in a report's place): the 8-byte value REFILL_DATA, a 12-byte
header (offset, size) and `size` bytes of the slave's commit log, never crossing one of
its segments' ends."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from ..replication.ha import HEADER, REFILL_DATA, REPORT, TAIL_BYTES, tail_digest
from ..store import MessageStore, StoreError

log = logging.getLogger(__name__)

MAX_CHUNK = 64 << 20


class LogForked(Exception):
    """The master found our log forked from its own (FORKED_FRAME)."""


def drop_forked_log(store: MessageStore) -> None:
    """Empty the store, to copy the master's log again from its last segment (as a new
    slave does): bytes past a fork are not the master's, and where the fork begins
    cannot be told cheaply."""
    log.error("HA: our log forks from the master's: dropping it (%d-%d) to copy the "
              "master's again", store.commitlog.min_offset, store.commitlog.max_offset)
    store.truncate(store.commitlog.min_offset)
    store.restart_at(0)
SLAVES_SEEN = "ha_slaves_seen"  # in the store root: this master has had a slave


def had_slaves(store: MessageStore) -> bool:
    """Whether a slave ever connected to this broker as master: only then can a slave
    hold acknowledged messages this master lost."""
    return (Path(store.config.root) / SLAVES_SEEN).exists()


def note_slave(store: MessageStore) -> None:
    marker = Path(store.config.root) / SLAVES_SEEN
    if not marker.exists():
        try:
            marker.write_text("a slave has followed this master: after a restart it refills "
                              "from its slaves before taking writes\n")
        except OSError as e:
            log.warning("cannot write %s: %s", marker, e)


def tail_of(store: MessageStore, offset: int) -> int:
    """Our tail digest before `offset`: the last TAIL_BYTES of its segment before it (0,
    "not known", when we hold none of them or not all the peer would)."""
    cl = store.commitlog
    if offset <= 0 or offset > cl.max_offset:
        return 0
    start = max(offset - TAIL_BYTES, (offset - 1) - (offset - 1) % cl.file_size)
    if start < cl.min_offset:
        return 0
    try:
        return tail_digest(bytes(cl.read(start, offset - start)))
    except StoreError:
        return 0


def forked(store: MessageStore, offset: int, peer_digest: int) -> bool:
    """Whether our bytes before `offset` differ from the peer's (both digests known)."""
    mine = tail_of(store, offset)
    return bool(mine and peer_digest and mine != peer_digest)


async def read_refill(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """After a REFILL_DATA marker: (offset, bytes)."""
    offset, size = HEADER.unpack(await reader.readexactly(HEADER.size))
    if not 0 < size <= MAX_CHUNK or offset < 0:
        raise ValueError(f"bad refill header: offset {offset}, size {size}")
    return offset, await reader.readexactly(size)


async def send_log(store: MessageStore, writer: asyncio.StreamWriter, offset: int, end: int,
                   batch: int) -> None:
    """Stream our log [offset, end) to a recovering master."""
    cl = store.commitlog
    if offset < cl.min_offset:
        raise StoreError(f"the master asks for our log from {offset}, but it starts at "
                         f"{cl.min_offset} (retention removed the rest)")
    log.warning("HA: the master lost its log past %d after a restart: sending it ours up "
                "to %d", offset, end)
    pos = offset
    while pos < end and not writer.is_closing():
        seg_end = pos - pos % cl.file_size + cl.file_size
        size = min(batch, seg_end - pos, end - pos)
        data = cl.read(pos, size)
        writer.write(REPORT.pack(REFILL_DATA) + HEADER.pack(pos, size) + bytes(data))
        await writer.drain()
        pos += size
