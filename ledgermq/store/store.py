"""MessageStore: the commit log, its consume queues and index, flushing, recovery, retention.

One lock orders every mutation (append, dispatch, truncate, retention); the flush thread
fsyncs outside it. Dispatch (consume-queue and index entries) follows the commit log up to
the dispatch bound: by default the end of the log, under replication the committed offset.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import shutil
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from ..wire.batch import LOCALHOST, EncodedBatch, encode_batch, encode_one
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .commitlog import CommitLog, RecoveryReport
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueue
from .flush import FlushService, LoopFlushWaiters
from .index import IndexService
from .mapped_file import DiskFullError, StoreError
from ..wire.message import (
    OFF_SYSFLAG, SYSFLAG_BORNHOST_V6, Message, MessageFormatError, StoredMessage,
    decode_message, decode_offset_msg_id, encode_properties,
)
from .results import GetResult, GetStatus, PutResult, PutStatus
from ..wire.scan import ScannedMessage
from ..wire.scan_batch import ScannedBatch, batch_from_messages

log = logging.getLogger(__name__)

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
ABORT_FILE = "abort"
CHECKPOINT_FILE = "checkpoint"


_valid_topics: set[str] = set()


def check_topic(topic: str) -> None:
    if topic in _valid_topics:
        return
    if not TOPIC_PATTERN.match(topic):
        raise MessageFormatError(
            f"topic {topic!r} is invalid: use 1-127 characters from [%|a-zA-Z0-9_-]")
    if len(_valid_topics) < 100_000:
        _valid_topics.add(topic)


@dataclass
class DispatchRun:
    """Consecutive messages of one queue, waiting for the dispatch bound to pass them."""

    topic: str
    queue_id: int
    first_queue_offset: int
    phys: np.ndarray
    sizes: np.ndarray
    tags: np.ndarray
    store_timestamps: np.ndarray | int
    index_keys: list[list[str]] | None
    end: int = -1  # commit-log offset just past the run's last message

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = int(self.phys[-1] + self.sizes[-1])

    def split(self, bound: int) -> tuple["DispatchRun | None", "DispatchRun | None"]:
        """(the part whose messages end at or below `bound`, the rest)."""
        if self.end <= bound:
            return self, None
        k = int(np.searchsorted(np.add(self.phys, self.sizes), bound, side="right"))
        if k == len(self.phys):
            return self, None
        if k == 0:
            return None, self

        def part(sl: slice, first: int) -> DispatchRun:
            ts = self.store_timestamps
            return DispatchRun(self.topic, self.queue_id, first, self.phys[sl], self.sizes[sl],
                               self.tags[sl], ts if isinstance(ts, int) else ts[sl],
                               self.index_keys[sl] if self.index_keys else None)

        return (part(slice(0, k), self.first_queue_offset),
                part(slice(k, None), self.first_queue_offset + k))


def runs_from_batch(b: ScannedBatch) -> list[DispatchRun]:
    """Split scanned messages into runs of one queue with consecutive queue offsets."""
    n = len(b)
    if n == 0:
        return []
    if isinstance(b.phys, tuple):
        return _runs_of_few(b)
    if b.topics.count(b.topics[0]) == n:
        topic_change = np.zeros(n - 1, bool)
    else:
        topic_change = np.fromiter((b.topics[i] != b.topics[i + 1] for i in range(n - 1)),
                                   bool, n - 1)
    breaks = np.nonzero(topic_change | (b.queue_ids[1:] != b.queue_ids[:-1]) |
                        (b.queue_offsets[1:] != b.queue_offsets[:-1] + 1))[0] + 1
    runs = []
    for lo, hi in zip([0, *breaks.tolist()], [*breaks.tolist(), n]):
        keys = b.index_keys[lo:hi]
        runs.append(DispatchRun(b.topics[lo], int(b.queue_ids[lo]), int(b.queue_offsets[lo]),
                                b.phys[lo:hi], b.sizes[lo:hi], b.tag_codes[lo:hi],
                                b.store_timestamps[lo:hi], keys if any(keys) else None))
    return runs


def _runs_of_few(b: ScannedBatch) -> list[DispatchRun]:
    """runs_from_batch for a batch of tuples, in plain Python."""
    runs, lo, n = [], 0, len(b)
    for hi in range(1, n + 1):
        if hi < n and b.topics[hi] == b.topics[lo] and b.queue_ids[hi] == b.queue_ids[lo] \
                and b.queue_offsets[hi] == b.queue_offsets[hi - 1] + 1:
            continue
        keys = b.index_keys[lo:hi]
        runs.append(DispatchRun(b.topics[lo], b.queue_ids[lo], b.queue_offsets[lo],
                                b.phys[lo:hi], b.sizes[lo:hi], b.tag_codes[lo:hi],
                                b.store_timestamps[lo:hi], keys if any(keys) else None))
        lo = hi
    return runs


def runs_from_scan(msgs: Sequence[ScannedMessage]) -> list[DispatchRun]:
    return runs_from_batch(batch_from_messages(list(msgs)))


class MessageStore:
    WAKE_FLUSHER_BYTES = 8 << 20

    def __init__(self, config: StoreConfig, *, store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f",
                 dispatch_follows_log: bool = True):
        self.config = config
        self.store_host = store_host
        self.root = config.root
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()  # one checkpoint file write at a time
        self.commitlog = CommitLog(config.commitlog_dir, config.mappedFileSizeCommitLog)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = IndexService(self.root / "index", config.maxHashSlotNum, config.maxIndexNum) \
            if config.messageIndexEnable else None
        self._next_queue_offset: dict[tuple[str, int], int] = {}
        self._pending: deque[DispatchRun] = deque()
        self.dispatch_follows_log = dispatch_follows_log
        self.dispatch_bound = 0
        self.dispatched_offset = 0
        self.listeners: list[Callable[[str, int, int], None]] = []
        self.disk_full = False
        self.disk_used_ratio = 0.0
        self.recovery: RecoveryReport | None = None
        self._sync_flush = config.flushDiskType is FlushDiskType.SYNC_FLUSH
        self._flusher = FlushService(
            self.commitlog.flush, self._flush_dispatch_and_checkpoint,
            group_commit=self._sync_flush,
            log_interval_ms=config.flushIntervalCommitLog,
            rest_interval_ms=config.flushIntervalConsumeQueue)
        self._loop_waiters: dict[asyncio.AbstractEventLoop, LoopFlushWaiters] = {}
        self._last_waiters: LoopFlushWaiters | None = None  # of the loop that asked last
        self._cleaner_stop = threading.Event()
        self._cleaner = threading.Thread(target=self._clean_loop, name="ledgermq-clean",
                                         daemon=True)
        self._open = False

    # ---- lifecycle ------------------------------------------------------------------
    def open(self, dispatch_limit: int | None = None) -> RecoveryReport:
        """Recover from the last checkpoint and start the flush and clean threads.

        `dispatch_limit` caps what recovery makes visible to consumers (replication passes
        its committed offset); by default everything in the log is visible.
        """
        t0 = time.monotonic()
        abort = self.root / ABORT_FILE
        report = RecoveryReport(crashed=abort.exists())
        abort.touch()
        cp = load_checkpoint(self.root / CHECKPOINT_FILE)
        safe = cp.safe_offset if cp else self.commitlog.min_offset
        self.commitlog.recover(safe, report)
        log_min, log_end = self.commitlog.min_offset, self.commitlog.max_offset
        for qdir in sorted((self.root / "consumequeue").glob("*/*")):
            if qdir.is_dir() and qdir.name.isdigit():
                cq = self._open_queue(qdir.parent.name, int(qdir.name))
                cq.recover(log_min, log_end)
                self._next_queue_offset[(cq.topic, cq.queue_id)] = cq.max_offset
        self.dispatched_offset = report.scanned_from
        runs = runs_from_scan(report.messages)
        report.messages = []
        for run in runs:
            key = (run.topic, run.queue_id)
            self._next_queue_offset[key] = max(self._next_queue_offset.get(key, 0),
                                               run.first_queue_offset + len(run.phys))
            self._pending.append(run)
        bound = log_end if dispatch_limit is None else min(dispatch_limit, log_end)
        self._set_bound(bound)
        self._update_disk_usage()
        self._flush_dispatch_and_checkpoint()
        report.seconds = time.monotonic() - t0
        if report.crashed or report.truncated_bytes:
            log.warning("recovered after %s: log ends at %d, scanned %d messages from %d, "
                        "cut %d bytes%s in %.3fs",
                        "a crash" if report.crashed else "a clean stop", report.end_offset,
                        report.messages_scanned, report.scanned_from, report.truncated_bytes,
                        f" ({report.truncated_reason})" if report.truncated_reason else "",
                        report.seconds)
        self.recovery = report
        self._flusher.start(self.commitlog.flushed_offset)
        self._cleaner.start()
        self._open = True
        return report

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._cleaner_stop.set()
        self._flusher.stop()  # its last round flushes the log, queues and checkpoint
        self._cleaner.join(timeout=30)
        with self._lock:
            self._flush_dispatch_and_checkpoint()
            for cq in self.queues.values():
                cq.close()
            if self.index:
                self.index.close()
            self.commitlog.close()
        (self.root / ABORT_FILE).unlink(missing_ok=True)

    def __enter__(self) -> "MessageStore":
        if not self._open:
            self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writes ---------------------------------------------------------------------
    def encode(self, topic: str, queue_id: int, bodies: Sequence[bytes],
               properties: Sequence[bytes] | bytes = b"", tags=None, *, flag=0, sys_flag=0,
               born_timestamp=0, born_host=LOCALHOST, reconsume_times=0,
               index_keys=None) -> EncodedBatch:
        """Encode messages for append (see encode_batch)."""
        check_topic(topic)
        if len(bodies) == 1 and isinstance(born_timestamp, int):  # no numpy for one
            return encode_one(topic, queue_id, bodies[0], properties, tags, flag, sys_flag,
                              born_timestamp, born_host, self.store_host, reconsume_times,
                              index_keys, self.config.maxMessageSize)
        return encode_batch(topic, queue_id, bodies, properties, tags, flag=flag,
                            sys_flag=sys_flag, born_timestamp=born_timestamp,
                            born_host=born_host, store_host=self.store_host,
                            reconsume_times=reconsume_times, index_keys=index_keys,
                            max_message_size=self.config.maxMessageSize)

    def append(self, batch: EncodedBatch) -> PutResult:
        """Write a batch to the commit log (no flush wait); dispatches it if the bound allows."""
        if self.disk_full or not self._open:
            return self._refusal()
        now = int(time.time() * 1000)
        with self._lock:
            key = (batch.topic, batch.queue_id)
            first_qoff = self._next_queue_offset.get(key, 0)
            start = self.commitlog.max_offset
            try:
                phys = self.commitlog.append_batch(batch, first_qoff, now)
            except MessageFormatError as e:
                self._rollback(start)
                return PutResult(PutStatus.MESSAGE_ILLEGAL, str(e))
            except DiskFullError as e:
                self._rollback(start)
                self.disk_full = True
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, str(e))
            except OSError as e:
                self._rollback(start)
                return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, f"{e}")
            n = len(batch)
            self._next_queue_offset[key] = first_qoff + n
            end = self.commitlog.max_offset
            if self.dispatch_follows_log and not self._pending:  # visible at once
                self.dispatch_bound = self.dispatched_offset = end
                self._dispatch_fields(batch.topic, batch.queue_id, first_qoff, phys,
                                      batch.sizes, batch.tag_codes, now, batch.index_keys)
            else:
                self._pending.append(DispatchRun(batch.topic, batch.queue_id, first_qoff, phys,
                                                 batch.sizes, batch.tag_codes, now,
                                                 batch.index_keys, end))
                if self.dispatch_follows_log:
                    self._set_bound(end)
        if end - self._flusher.flushed_offset >= self.WAKE_FLUSHER_BYTES:
            self._flusher.wakeup()  # keep the unflushed window (and recovery's scan) small
        return PutResult(PutStatus.PUT_OK, phys_offsets=phys, queue_offset=first_qoff,
                         count=n, end_offset=end, store_timestamp=now,
                         wrote_bytes=batch.nbytes)

    def _rollback(self, offset: int) -> None:
        if self.commitlog.max_offset != offset:
            self.commitlog.cut(offset)
            self._flusher.lower_to(offset)

    def _refusal(self) -> PutResult | None:
        if not self._open:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the message store is not open")
        if self.disk_full:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                             f"disk full: {self.disk_used_ratio:.1f}% used, above "
                             f"diskMaxUsedSpaceRatio={self.config.diskMaxUsedSpaceRatio}")
        return None

    def flush_future(self, result: PutResult) -> concurrent.futures.Future | None:
        """Under SYNC_FLUSH, a future done once the result's batch is on disk."""
        if self.config.flushDiskType is not FlushDiskType.SYNC_FLUSH or not result.ok:
            return None
        return self._flusher.request(result.end_offset)

    def put(self, batch: EncodedBatch) -> PutResult:
        """Append and, under SYNC_FLUSH, wait for the fsync (FLUSH_DISK_TIMEOUT after
        syncFlushTimeout ms)."""
        result = self.append(batch)
        fut = self.flush_future(result)
        if fut is not None:
            try:
                fut.result(timeout=self.config.syncFlushTimeout / 1000)
            except concurrent.futures.TimeoutError:
                self.mark_flush_timeout(result)
        return result

    def durable_wait(self, result: PutResult) -> "asyncio.Future[bool] | None":
        """Under SYNC_FLUSH, a future of the running loop: True once the result's batch is
        flushed, False after syncFlushTimeout. None when there is nothing to wait for."""
        if not self._sync_flush or result.status is not PutStatus.PUT_OK:
            return None
        return self._flush_waiters().wait(result.end_offset)

    def _flush_waiters(self) -> LoopFlushWaiters:
        loop = asyncio.get_running_loop()
        waiters = self._last_waiters
        if waiters is not None and waiters.loop is loop:
            return waiters
        waiters = self._loop_waiters.get(loop)
        if waiters is None:
            waiters = self._loop_waiters[loop] = LoopFlushWaiters(
                loop, self._flusher, self.config.syncFlushTimeout / 1000,
                self.mark_flush_timeout)
        self._last_waiters = waiters
        return waiters

    def mark_flush_timeout(self, result: PutResult) -> None:
        result.status = PutStatus.FLUSH_DISK_TIMEOUT
        result.error = f"not flushed within syncFlushTimeout={self.config.syncFlushTimeout} ms"

    def put_async(self, batch: EncodedBatch) -> "asyncio.Future[PutResult]":
        """As put(), for asyncio callers: a future of the result, done once the batch is
        durable (or marked FLUSH_DISK_TIMEOUT after syncFlushTimeout) without blocking the
        loop."""
        result = self.append(batch)
        if not self._sync_flush or result.status is not PutStatus.PUT_OK:
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(result)
            return fut
        return self._flush_waiters().wait(result.end_offset, result)

    def put_message(self, msg: Message) -> PutResult:
        """One message (convenience; batches are the fast path)."""
        try:
            batch = self.encode(msg.topic, msg.queue_id, [msg.body],
                                encode_properties(msg.properties), msg.tags, flag=msg.flag,
                                sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                                born_host=msg.born_host, reconsume_times=msg.reconsume_times,
                                index_keys=[msg.index_keys])
        except MessageFormatError as e:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, str(e))
        return self.put(batch)

    def start_at(self, offset: int) -> None:
        """An empty store's log begins at `offset` (see CommitLog.start_at)."""
        with self._lock:
            self.commitlog.start_at(offset)
            self.dispatch_bound = self.dispatched_offset = offset
            self._flush_dispatch_and_checkpoint()

    def restart_at(self, offset: int) -> None:
        """Begin afresh at `offset` (a segment start) with every segment and consume queue
        dropped: a replica whose leader no longer holds the entries that would bring it
        up to date (retention deleted them) starts over at the leader's first entry. The
        store must hold no messages (truncate it first)."""
        with self._lock:
            if self.commitlog.max_offset != self.commitlog.min_offset:
                raise StoreError(f"cannot restart at {offset}: the store still holds "
                                 f"{self.commitlog.min_offset}-{self.commitlog.max_offset}")
            log.warning("restarting the store empty at offset %d", offset)
            for cq in self.queues.values():
                cq.destroy()
            self.queues.clear()
            self._next_queue_offset.clear()
            self._pending.clear()
            self.commitlog.clear()
            self._flusher.lower_to(0)
            self.start_at(offset)

    def append_raw(self, offset: int, data, *, partial_tail: bool = False) -> int:
        """Append replicated bytes at `offset`; returns the new end of the log. With
        `partial_tail`, an unfinished last message is left out (the HA stream splits
        messages anywhere)."""
        with self._lock:
            batches = self.commitlog.append_raw(offset, data, partial_tail=partial_tail)
            for run in (r for b in batches for r in runs_from_batch(b)):
                key = (run.topic, run.queue_id)
                self._next_queue_offset[key] = max(self._next_queue_offset.get(key, 0),
                                                   run.first_queue_offset + len(run.phys))
                self._pending.append(run)
            end = self.commitlog.max_offset
            if self.dispatch_follows_log:
                self._set_bound(end)
            return end

    def truncate(self, offset: int) -> None:
        """Cut the log (and consume queues) back to `offset`, crash-safely (replication)."""
        with self._lock:
            self.commitlog.truncate(offset)
            self._flusher.lower_to(offset)
            for cq in self.queues.values():
                cq.truncate_from_phys(offset)
                self._next_queue_offset[(cq.topic, cq.queue_id)] = cq.max_offset
            kept: deque[DispatchRun] = deque()
            for run in self._pending:
                below, _ = run.split(offset)
                if below is not None:
                    kept.append(below)
                    key = (below.topic, below.queue_id)
                    self._next_queue_offset[key] = below.first_queue_offset + len(below.phys)
            self._pending = kept
            self.dispatch_bound = min(self.dispatch_bound, offset)
            self.dispatched_offset = min(self.dispatched_offset, offset)
            self._flush_dispatch_and_checkpoint()

    # ---- dispatch -------------------------------------------------------------------
    def set_dispatch_bound(self, offset: int) -> None:
        """Make messages ending at or below `offset` visible to consumers."""
        with self._lock:
            self._set_bound(min(offset, self.commitlog.max_offset))

    def _set_bound(self, bound: int) -> None:
        if bound < self.dispatch_bound:
            return
        self.dispatch_bound = bound
        while self._pending:
            run = self._pending[0]
            below, rest = run.split(bound)
            if below is None:
                break
            self._dispatch(below)
            if rest is None:
                self._pending.popleft()
            else:
                self._pending[0] = rest
                break
        self.dispatched_offset = int(self._pending[0].phys[0]) if self._pending else bound

    def _dispatch(self, run: DispatchRun) -> None:
        self._dispatch_fields(run.topic, run.queue_id, run.first_queue_offset, run.phys,
                              run.sizes, run.tags, run.store_timestamps, run.index_keys)

    def _dispatch_fields(self, topic: str, queue_id: int, first_queue_offset: int, phys,
                         sizes, tags, store_timestamps, index_keys) -> None:
        """Consume-queue entries, index records and pull wake-ups for consecutive messages
        of one queue."""
        cq = self.queues.get((topic, queue_id)) or self._open_queue(topic, queue_id)
        cq.put(first_queue_offset, phys, sizes, tags)
        if self.index is not None and index_keys and len(phys) == 1:
            ts = store_timestamps
            self.index.put(topic, index_keys[0], int(phys[0]),
                           ts if isinstance(ts, int) else int(ts[0]))
        elif self.index is not None and index_keys:
            counts = np.fromiter(map(len, index_keys), np.int64, len(index_keys))
            keys = [k for ks in index_keys for k in ks]
            ts = store_timestamps
            ts = np.full(len(phys), ts, np.int64) if isinstance(ts, int) else ts
            self.index.put_many(topic, keys, np.repeat(phys, counts), np.repeat(ts, counts))
        for listener in self.listeners:
            listener(topic, queue_id, cq.max_offset)

    def _open_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(self.root / "consumequeue" / topic / str(queue_id), topic, queue_id,
                          self.config.entries_per_cq_file)
        self.queues[(topic, queue_id)] = cq
        return cq

    # ---- flush and checkpoint -------------------------------------------------------
    def _flush_dispatch_and_checkpoint(self) -> None:
        with self._lock:
            dispatched = self.dispatched_offset
            queues = list(self.queues.values())
        with self._checkpoint_lock:  # the rest-flush thread's round, or a cut of the log
            for cq in queues:
                cq.flush()
            if self.index is not None:
                self.index.flush()
            flushed = self.commitlog.flushed_offset
            save_checkpoint(self.root / CHECKPOINT_FILE, Checkpoint(flushed, dispatched))

    # ---- reads ----------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     max_bytes: int = 256 * 1024,
                     tag_codes: Iterable[int] | None = None) -> GetResult:
        """Messages of a queue from `offset`, as stored (RocketMQ's getMessage statuses)."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
        codes = None if tag_codes is None else np.fromiter(tag_codes, np.int64)
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        qoffs: list[np.ndarray] = []
        cur = offset
        log_min = self.commitlog.min_offset
        # with a tag filter, skip through up to this many entries looking for matches
        budget = max(16000, max_count * 20) if codes is not None else max_count
        while (cur < hi and budget > 0 and result.message_count < max_count
               and result.total_bytes < max_bytes):
            want = max_count - result.message_count
            ents = cq.entries(cur, budget if codes is not None else want)
            budget -= len(ents)
            if len(ents) == 0:
                break
            phys = ents["phys"].astype(np.int64)
            sizes = ents["size"].astype(np.int64)
            keep = phys >= log_min
            if codes is not None:
                keep &= np.isin(ents["tag"], codes)
            # stop where max_bytes would be passed (always take at least one message)
            taken_bytes = np.cumsum(np.where(keep, sizes, 0)) + result.total_bytes
            over = np.nonzero(keep & (taken_bytes > max_bytes))[0]
            n = len(ents)
            if len(over):
                first_over = int(over[0])
                n = first_over + (1 if result.message_count == 0 and
                                  not keep[:first_over].any() else 0)
            sel = np.nonzero(keep[:n])[0][:want]
            if len(sel) == want and codes is not None:
                n = min(n, int(sel[-1]) + 1)
            if len(sel):
                self._gather(phys[sel], sizes[sel], result)
                qoffs.append(sel + cur)
            cur += n
            if n < len(ents):
                break
        result.next_begin_offset = cur
        if result.message_count:
            result.status = GetStatus.FOUND
            result.queue_offsets = np.concatenate(qoffs)
        elif cur > offset and offset < hi:
            result.status = GetStatus.NO_MATCHED_MESSAGE
        return result

    def _gather(self, phys: np.ndarray, sizes: np.ndarray, result: GetResult) -> None:
        """Add views on the commit log for messages at `phys`, merging contiguous ones."""
        ends = phys + sizes
        seg_size = self.commitlog.file_size
        breaks = np.nonzero((phys[1:] != ends[:-1]) |
                            (phys[1:] // seg_size != phys[:-1] // seg_size))[0] + 1
        starts = np.concatenate(([0], breaks))
        stops = np.concatenate((breaks, [len(phys)]))
        for a, b in zip(starts.tolist(), stops.tolist()):
            lo = int(phys[a])
            result.buffers.append(self.commitlog.read(lo, int(ends[b - 1]) - lo))
        result.message_count += len(phys)
        result.total_bytes += int(sizes.sum())

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.queues if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _) in self.queues})

    def message_at(self, phys: int) -> StoredMessage:
        size = self.commitlog.size_at(phys)
        return decode_message(self.commitlog.read(phys, size))

    def store_timestamp_at(self, phys: int) -> int:
        view = self.commitlog.read(phys, 80)
        sys_flag = struct.unpack_from(">i", view, OFF_SYSFLAG)[0]
        at = 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8)
        return struct.unpack_from(">q", view, at)[0]

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after `timestamp_ms`."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.entry(mid)
            if entry is None or entry[0] < self.commitlog.min_offset:
                lo = mid + 1
            elif self.store_timestamp_at(entry[0]) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def view_message_by_id(self, msg_id: str) -> StoredMessage:
        _, _, phys = decode_offset_msg_id(msg_id)
        if not self.commitlog.min_offset <= phys < self.commitlog.max_offset:
            raise StoreError(f"message {msg_id} is not in this store (offset {phys})")
        return self.message_at(phys)

    def query_by_key(self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0,
                     end_ms: int = 1 << 62) -> list[StoredMessage]:
        """Messages of `topic` whose KEYS contain `key` or whose UNIQ_KEY is `key`."""
        if self.index is None:
            raise StoreError("messageIndexEnable=false: no key index on this broker")
        out = []
        for phys in sorted(self.index.lookup(topic, key, max_num * 2, begin_ms, end_ms)):
            if phys < self.commitlog.min_offset or phys >= self.commitlog.max_offset:
                continue
            msg = self.message_at(phys)
            if msg.topic == topic and key in msg.index_keys:
                out.append(msg)
            if len(out) >= max_num:
                break
        return out

    # ---- retention and disk space --------------------------------------------------
    def _update_disk_usage(self) -> None:
        usage = shutil.disk_usage(self.commitlog.dir)
        self.disk_used_ratio = 100.0 * (usage.total - usage.free) / usage.total
        full = self.disk_used_ratio > self.config.diskMaxUsedSpaceRatio
        if full and not self.disk_full:
            log.error("disk %.1f%% used, above diskMaxUsedSpaceRatio=%s: refusing writes",
                      self.disk_used_ratio, self.config.diskMaxUsedSpaceRatio)
        elif self.disk_full and not full:
            log.warning("disk usage back to %.1f%%: accepting writes", self.disk_used_ratio)
        self.disk_full = full

    def delete_expired(self, now: float | None = None) -> int:
        """Delete commit-log segments older than fileReservedTime (never the last one, nor
        one not yet flushed and dispatched) and the queue/index entries below them."""
        now = time.time() if now is None else now
        horizon = now - self.config.fileReservedTime * 3600
        with self._lock:
            files = self.commitlog.files.files
            safe = min(self.commitlog.flushed_offset, self.dispatched_offset)
            n = 0
            for f in files[:-1]:
                if f.end <= safe and f.path.stat().st_mtime < horizon:
                    n += 1
                else:
                    break
            if not n:
                return 0
            self.commitlog.files.drop_front(n)
            log_min = self.commitlog.min_offset
            for cq in self.queues.values():
                cq.delete_below(log_min)
            if self.index is not None:
                self.index.delete_below(log_min)
            log.info("retention: deleted %d commit-log segments; log now starts at %d",
                     n, log_min)
            return n

    def _clean_loop(self) -> None:
        interval = self.config.cleanResourceInterval / 1000
        while not self._cleaner_stop.wait(interval):
            try:
                self.delete_expired()
                self._update_disk_usage()
            except Exception:
                log.exception("retention round failed")

    def runtime_info(self) -> dict:
        return {
            "commitLogMinOffset": self.commitlog.min_offset,
            "commitLogMaxOffset": self.commitlog.max_offset,
            "commitLogFlushedOffset": self.commitlog.flushed_offset,
            "dispatchedOffset": self.dispatched_offset,
            "queues": len(self.queues),
            "diskUsedRatio": round(self.disk_used_ratio, 2),
            "diskFull": self.disk_full,
            "flushDiskType": self.config.flushDiskType.value,
        }
