"""A single message written and made visible at once (#32): the usual one-message send on
a store whose consumers see writes as they land. Its bytes, their positions and store
time, and its consume-queue entry go into the mapped segments in one compiled call,
put_single, when the log's last segment has room for it and its queue's entry falls in
the queue's last segment. Anything else (a segment to start, a filler to write, a queue
not yet open) goes the general way of MessageStore.append.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..wire.batch import POSITIONS, TIMESTAMP, EncodedBatch
from ..wire.message import OFF_QUEUEOFFSET, OFF_STORETIMESTAMP, HEADER_SIZE
from ..wire.native import twin
from .consume_queue import ENTRY_SIZE, ENTRY_STRUCT, ConsumeQueue
from .results import PutResult, PutStatus

if TYPE_CHECKING:
    from .commitlog import CommitLog  # (which imports put_single from here)

_INT64 = range(-2**63, 2**63)


@twin("put_single")
def put_single(log, log_pos: int, msg, queue_offset: int, phys: int, store_ts: int, cq,
               cq_pos: int, tag: int) -> None:
    """The stored message `msg` written at log[log_pos:] with its queue offset, physical
    offset and store time, and its consume-queue entry (phys, size, tag) at cq[cq_pos:].
    TypeError for an argument that is not an int where one goes (or not a buffer where
    one goes), OverflowError past int64, BufferError for a read-only log or queue,
    ValueError when either write would not fit (nothing written then)."""
    for i, v in ((1, log_pos), (3, queue_offset), (4, phys), (5, store_ts), (7, cq_pos),
                 (8, tag)):
        if not isinstance(v, int):
            raise TypeError(f"put_single: argument {i} is not an int")
        if v not in _INT64:
            raise OverflowError(f"put_single: argument {i} is out of int64's range")
    log_size = _writable(log).nbytes
    n = memoryview(msg).nbytes
    cq_size = _writable(cq).nbytes
    if n < HEADER_SIZE or n > 2**31 - 1 or not 0 <= log_pos <= log_size - n or \
            not 0 <= cq_pos <= cq_size - ENTRY_SIZE:
        raise ValueError("the message or its queue entry does not fit")
    log[log_pos:log_pos + n] = msg
    POSITIONS.pack_into(log, log_pos + OFF_QUEUEOFFSET, queue_offset, phys)
    TIMESTAMP.pack_into(log, log_pos + OFF_STORETIMESTAMP, store_ts)
    ENTRY_STRUCT.pack_into(cq, cq_pos, phys, n, tag)


def _writable(buf) -> memoryview:
    view = memoryview(buf)  # (TypeError for what is not a buffer)
    if view.readonly:
        raise BufferError("put_single: a read-only buffer cannot take the write")
    return view


class SingleWrites:
    """Mixed into MessageStore; runs under the store's lock."""

    commitlog: "CommitLog"
    queues: dict[tuple[str, int], ConsumeQueue]
    _next_queue_offset: dict[tuple[str, int], int]
    dispatch_bound: int
    dispatched_offset: int
    _index_and_wake: Callable[..., None]

    def _append_visible_one(self, batch: EncodedBatch, now: int) -> PutResult | None:
        """Append a batch of one and dispatch it, when its queue is open and both its
        segments stand ready; None (nothing written) otherwise."""
        key = (batch.topic, batch.queue_id)
        qoff = self._next_queue_offset.get(key, 0)
        cq = self.queues.get(key)
        slot = cq.next_slot(qoff) if cq is not None else None
        if cq is None or slot is None:
            return None
        phys = self.commitlog.append_single(batch, qoff, now, *slot)
        if phys < 0:
            return None
        cq.filled(qoff)
        self._next_queue_offset[key] = qoff + 1
        end = self.dispatch_bound = self.dispatched_offset = phys + len(batch.buf)
        self._index_and_wake(cq, phys, now, batch.index_keys[0] if batch.index_keys else None)
        # (status, error, phys_offsets, queue_offset, count, end_offset, store_timestamp,
        # wrote_bytes: positional, half a keyword call's cost)
        return PutResult(PutStatus.PUT_OK, "", (phys,), qoff, 1, end, now, len(batch.buf))
