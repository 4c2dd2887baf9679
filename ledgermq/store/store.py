"""MessageStore: the commit log, its consume queues and index, flushing, recovery, retention.

One lock orders every mutation (append, dispatch, truncate, retention); the flush thread
fsyncs outside it. Dispatch (consume-queue and index entries) follows the commit log up to
the dispatch bound: by default the end of the log, under replication the committed offset.

This module holds the store's state, its lifecycle (open recovers from the checkpoint),
local writes and the checkpoint. The rest is mixed in, one concept a module:
  dispatch.py   consume-queue and index entries up to the dispatch bound
  reads.py      a queue's messages, lookups by offset, time, id and key
  replica.py    replicated appends, truncation, restarting empty
  retention.py  expired segments and the disk-full guard
  single.py     a single message and its queue entry written in one call (the usual send)
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import threading
import time
from collections import deque
from typing import Callable, Sequence

from ..runtime.clock import wall_ms
from ..runtime.files import DirectoryLock
from ..wire.batch import LOCALHOST, EncodedBatch, encode_batch, encode_one
from ..wire.message import (
    PROPERTY_TAGS, Message, MessageFormatError, StoredMessage, encode_properties, property_value,
)
from ..wire.scan import index_keys_of
from .commitlog import CommitLog, RecoveryReport
from .config import FlushDiskType, StoreConfig
from .consume_queue import ENTRY_SIZE, ConsumeQueue
from .dispatch import DispatchRun, QueueDispatch, runs_from_scan
from .flush import FlushService, LoopFlushWaiters
from .index import IndexService
from .mapped_file import DISK_FULL_ERRNOS, DiskFullError
from .marks.abort_mark import ABORT_FILE, open_mark
from .marks.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .reads import StoreReads
from .replica import ReplicaWrites
from .results import PutResult, PutStatus
from .retention import Retention
from .single import SingleWrites

log = logging.getLogger(__name__)

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
CHECKPOINT_FILE = "checkpoint"
ENCODING_ROOM = 64 * 1024  # RocketMQ's room for a stored message's header, topic, properties


_valid_topics: set[str] = set()


def check_topic(topic: str) -> None:
    if topic in _valid_topics:
        return
    if not TOPIC_PATTERN.match(topic):
        raise MessageFormatError(
            f"topic {topic!r} is invalid: use 1-127 characters from [%|a-zA-Z0-9_-]")
    if len(_valid_topics) < 100_000:
        _valid_topics.add(topic)


class MessageStore(SingleWrites, QueueDispatch, StoreReads, ReplicaWrites, Retention):
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
        self.disk_full_reason = ""  # set by a write that hit ENOSPC; cleared by the cleaner
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
        self._dir_lock = DirectoryLock(self.root)

    # ---- lifecycle ------------------------------------------------------------------
    def open(self, dispatch_limit: int | None = None) -> RecoveryReport:
        """Recover from the last checkpoint and start the flush and clean threads.

        `dispatch_limit` caps what recovery makes visible to consumers (replication passes
        its committed offset); by default everything in the log is visible. Refuses
        (DirectoryInUse) a store another process has open.
        """
        self._dir_lock.acquire()
        try:
            return self._open_locked(dispatch_limit)
        except BaseException:
            self._dir_lock.release()
            raise

    def _open_locked(self, dispatch_limit: int | None) -> RecoveryReport:
        t0 = time.monotonic()
        crashed, same_boot = open_mark(self.root / ABORT_FILE)
        report = RecoveryReport(crashed=crashed, same_boot=same_boot)
        cp = load_checkpoint(self.root / CHECKPOINT_FILE)
        safe = cp.safe_offset if cp else self.commitlog.min_offset
        self.commitlog.recover(safe, report, self.config.recoverVerifyBytes)
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
            self._queue_pending(run)
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

    @property
    def is_open(self) -> bool:
        """Recovered and serving: the log's offsets are known."""
        return self._open

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
        self._dir_lock.release()

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
        # as RocketMQ: maxMessageSize bounds a body; the whole stored message may be
        # ENCODING_ROOM more (topic, properties, header)
        most = self.config.maxMessageSize
        if len(bodies) == 1 and isinstance(born_timestamp, int):  # no numpy for one
            if len(bodies[0]) > most:
                raise MessageFormatError(
                    f"message 0's body is {len(bodies[0])} bytes, above maxMessageSize {most}")
            return encode_one(topic, queue_id, bodies[0], properties, tags, flag, sys_flag,
                              born_timestamp, born_host, self.store_host, reconsume_times,
                              index_keys, most + ENCODING_ROOM)
        if bodies and max(map(len, bodies)) > most:
            i = next(i for i, b in enumerate(bodies) if len(b) > most)
            raise MessageFormatError(
                f"message {i}'s body is {len(bodies[i])} bytes, above maxMessageSize {most}")
        return encode_batch(topic, queue_id, bodies, properties, tags, flag=flag,
                            sys_flag=sys_flag, born_timestamp=born_timestamp,
                            born_host=born_host, store_host=self.store_host,
                            reconsume_times=reconsume_times, index_keys=index_keys,
                            max_message_size=most + ENCODING_ROOM)

    def encode_again(self, msg: StoredMessage, topic: str, queue_id: int,
                     properties: dict[str, str], *, sys_flag: int | None = None,
                     reconsume_times: int | None = None) -> EncodedBatch:
        """A stored message as a new one in `topic`/`queue_id` with `properties` (a delayed
        or timer message now due, a committed half message, a POP redelivery, a replayed
        entry): body, flag, sys flag, born time and host, and reconsume count carried over
        unless given; tags and keys indexed from `properties`. MessageFormatError when it
        cannot be stored there."""
        raw = encode_properties(properties)
        return self.encode(
            topic, queue_id, [msg.body], raw, property_value(raw, PROPERTY_TAGS), flag=msg.flag,
            sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
            born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
            index_keys=[index_keys_of(raw)])

    def append(self, batch: EncodedBatch) -> PutResult:
        """Write a batch to the commit log (no flush wait); dispatches it if the bound allows."""
        if self.disk_full or not self._open:
            return self._refusal()
        now = wall_ms()
        with self._lock:
            result = None
            if len(batch.sizes) == 1 and self.dispatch_follows_log and not self._pending:
                result = self._append_visible_one(batch, now)  # the usual single send
            if result is None:
                result = self._append_locked(batch, now)
        if result.end_offset - self._flusher.flushed_offset >= self.WAKE_FLUSHER_BYTES:
            self._flusher.wakeup()  # keep the unflushed window (and recovery's scan) small
        return result

    def _append_locked(self, batch: EncodedBatch, now: int) -> PutResult:
        """append's general way (under the lock): any batch, segments and fillers made as
        needed, a failed write cut back and answered as a refusal."""
        n = len(batch.sizes)
        key = (batch.topic, batch.queue_id)
        first_qoff = self._next_queue_offset.get(key, 0)
        start = self.commitlog.max_offset
        try:
            # the queue's entries get their file before the log moves: a queue file
            # that cannot be created must refuse the write, not follow it half-done
            cq = self._reserve_queue(key, first_qoff, first_qoff + n)
            phys = self.commitlog.append_batch(batch, first_qoff, now)
        except (MessageFormatError, DiskFullError, OSError) as e:
            return self._refused_write(start, e)
        self._next_queue_offset[key] = first_qoff + n
        end = self.commitlog.max_offset
        if self.dispatch_follows_log and not self._pending:  # visible at once
            self.dispatch_bound = self.dispatched_offset = end
            self._dispatch_fields(batch.topic, batch.queue_id, first_qoff, phys, batch.sizes,
                                  batch.tag_codes, now, batch.index_keys)
        else:
            self._pending.append(DispatchRun(batch.topic, batch.queue_id, first_qoff, phys,
                                             batch.sizes, batch.tag_codes, now,
                                             batch.index_keys, end))
            if self.dispatch_follows_log:
                self._set_bound(end)
        return PutResult(PutStatus.PUT_OK, phys_offsets=phys, queue_offset=first_qoff,
                         count=n, end_offset=end, store_timestamp=now,
                         wrote_bytes=batch.nbytes)

    def _refused_write(self, start: int, e: Exception) -> PutResult:
        """The result of an append that raised: the log is cut back to where it was, so
        the next write (after space returns, on ENOSPC) lands at the right offset."""
        self._rollback(start)
        if isinstance(e, MessageFormatError):
            return PutResult(PutStatus.MESSAGE_ILLEGAL, str(e))
        if isinstance(e, DiskFullError) or getattr(e, "errno", None) in DISK_FULL_ERRNOS:
            self.disk_full = True
            self.disk_full_reason = str(e)
            return self._refusal()  # type: ignore[return-value]  # (disk_full: a result)
        return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, f"{e}")

    def _rollback(self, offset: int) -> None:
        if self.commitlog.max_offset != offset:
            self.commitlog.cut(offset)
            self._flusher.lower_to(offset)

    def _refusal(self) -> PutResult | None:
        if not self._open:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the message store is not open")
        if self.disk_full:
            why = self.disk_full_reason or (
                f"{self.disk_used_ratio:.1f}% used, above "
                f"diskMaxUsedSpaceRatio={self.config.diskMaxUsedSpaceRatio}")
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                             f"disk full: {why}; writes resume once space is free")
        return None

    def _reserve_queue(self, key: tuple[str, int], first: int, end: int) -> ConsumeQueue:
        """Create the consume-queue files that entries [first, end) need (in order: an
        empty queue's first file is the one holding `first`); returns the queue."""
        cq = self.queues.get(key) or self._open_queue(*key)
        cq.files.ensure(first * ENTRY_SIZE)
        if end - first > 1:
            cq.files.ensure((end - 1) * ENTRY_SIZE)
        return cq

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

    def flush_wait(self, end_offset: int) -> "asyncio.Future[bool]":
        """Group commit on demand, whatever flushDiskType says (checkpoint mode counts only
        copies on disk): a future of the running loop, True once the log is flushed up to
        `end_offset`, False after syncFlushTimeout. Waiters share the flushes. (The GIL
        switch interval stays as it is: shortened, as SYNC_FLUSH does, it cost a checkpoint
        group on 2 cores ~15% of its pipelined rate.)"""
        return self._flush_waiters().wait(end_offset)

    @property
    def flush_rounds(self) -> int:
        """How many flushes made more of the commit log durable."""
        return self._flusher.rounds

    @property
    def flush_latency(self):
        """A histogram (histogram.Histogram) of those flushes' durations in ms."""
        return self._flusher.latency

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

    # ---- status ---------------------------------------------------------------------
    def runtime_info(self) -> dict:
        return {
            "commitLogMinOffset": self.commitlog.min_offset,
            "commitLogMaxOffset": self.commitlog.max_offset,
            "commitLogFlushedOffset": self.commitlog.flushed_offset,
            "commitLogFlushes": self._flusher.rounds,
            "dispatchedOffset": self.dispatched_offset,
            "queues": len(self.queues),
            "diskUsedRatio": round(self.disk_used_ratio, 2),
            "diskFull": self.disk_full,
            "flushDiskType": self.config.flushDiskType.value,
        }
