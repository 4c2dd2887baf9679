"""Reads: a queue's messages from an offset, and single messages found by commit-log
offset, store time, message id or key.

Reads take no lock. Consume-queue entries that point below the commit log's first
offset (retention deleted their segment) are skipped, never read.
"""
from __future__ import annotations

import struct
from typing import Iterable

import numpy as np

from ..wire.message import (
    OFF_SYSFLAG, SYSFLAG_BORNHOST_V6, MessageFormatError, StoredMessage, decode_message,
    decode_offset_msg_id,
)
from ..wire.native import twin_or_fallback
from .commitlog import CommitLog
from .consume_queue import ENTRY_SIZE, ConsumeQueue, walk_entries
from .index import IndexService
from .mapped_file import StoreError
from .results import GetResult, GetStatus


@twin_or_fallback("run_views")
def run_views(view: memoryview, base: int, runs: list[int]) -> list[memoryview]:
    """Slices of `view`, which starts at commit-log offset `base`, for the runs lo, hi,
    lo, hi, ... of the log (the buffers a pull answers with, not copied)."""
    return [view[runs[i] - base:runs[i + 1] - base] for i in range(0, len(runs) - 1, 2)]


class StoreReads:
    """Mixed into MessageStore."""

    commitlog: CommitLog
    queues: dict[tuple[str, int], ConsumeQueue]
    _next_queue_offset: dict[tuple[str, int], int]
    index: IndexService | None

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
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        if tag_codes is None:
            return self._walk_plain(cq, offset, max_count, max_bytes, result)
        return self._walk_filtered(cq, offset, max_count, max_bytes, result,
                                   np.fromiter(tag_codes, np.int64))

    def _walk_plain(self, cq: ConsumeQueue, offset: int, max_count: int, max_bytes: int,
                    result: GetResult) -> GetResult:
        """get_messages without a tag filter: a pull takes tens of entries, which
        walk_entries walks faster than numpy's per-call cost allows (the filtered walk may
        skip through thousands)."""
        hi, log = result.max_offset, self.commitlog
        log_min, seg_size = log.min_offset, log.file_size
        cur, count, total, qoffs = offset, 0, 0, []
        while cur < hi and count < max_count and total < max_bytes:
            ents = cq.raw_entries(cur, max_count - count)
            if not ents:
                break
            runs, kept, n, count, total = walk_entries(ents, cur, log_min, seg_size, count,
                                                       total, max_bytes)
            qoffs += kept
            if runs:
                self._views(runs, result)
            cur += n
            if n * ENTRY_SIZE < len(ents):
                break
        result.next_begin_offset = cur
        result.message_count, result.total_bytes = count, total
        if count:
            result.status = GetStatus.FOUND
            result.queue_offsets = qoffs  # (read by few: not made an array)
        elif cur > offset:
            result.status = GetStatus.NO_MATCHED_MESSAGE
        return result

    def _views(self, runs: list[int], result: GetResult) -> None:
        """Views on the commit log for runs lo, hi, lo, hi, ... (none crosses a segment)."""
        log = self.commitlog
        seg = log.files.find(runs[0])
        if seg is not None and runs[-1] <= min(seg.end, log.max_offset):
            # every run in one segment (the usual case): sliced here
            result.buffers += run_views(seg.view, seg.start, runs)
        else:
            result.buffers += [log.read(runs[i], runs[i + 1] - runs[i])
                               for i in range(0, len(runs), 2)]

    def _walk_filtered(self, cq: ConsumeQueue, offset: int, max_count: int, max_bytes: int,
                       result: GetResult, codes: np.ndarray) -> GetResult:
        hi = result.max_offset
        qoffs: list[np.ndarray] = []
        cur = offset
        log_min = self.commitlog.min_offset
        # skip through up to this many entries looking for matches
        budget = max(16000, max_count * 20)
        while (cur < hi and budget > 0 and result.message_count < max_count
               and result.total_bytes < max_bytes):
            want = max_count - result.message_count
            ents = cq.entries(cur, budget)
            budget -= len(ents)
            if len(ents) == 0:
                break
            phys = ents["phys"].astype(np.int64)
            sizes = ents["size"].astype(np.int64)
            keep = (phys >= log_min) & np.isin(ents["tag"], codes)
            # stop where max_bytes would be passed (always take at least one message)
            taken_bytes = np.cumsum(np.where(keep, sizes, 0)) + result.total_bytes
            over = np.nonzero(keep & (taken_bytes > max_bytes))[0]
            n = len(ents)
            if len(over):
                first_over = int(over[0])
                n = first_over + (1 if result.message_count == 0 and
                                  not keep[:first_over].any() else 0)
            sel = np.nonzero(keep[:n])[0][:want]
            if len(sel) == want:
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
        runs = np.empty(2 * (len(breaks) + 1), np.int64)
        runs[0::2] = phys[np.concatenate(([0], breaks))]
        runs[1::2] = ends[np.concatenate((breaks - 1, [len(phys) - 1]))]
        self._views(runs.tolist(), result)
        result.message_count += len(phys)
        result.total_bytes += int(sizes.sum())

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def queue_ids(self, topic: str) -> list[int]:
        """Every queue of `topic` the log holds, including those whose messages are not yet
        visible (past the dispatch bound): a new master serves them all."""
        return sorted(q for (t, q) in self._known_queues() if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _) in self._known_queues()})

    def _known_queues(self) -> set[tuple[str, int]]:
        # (list() of a dict is one step under the GIL: the dispatch thread may add keys)
        return set(list(self.queues)) | set(list(self._next_queue_offset))

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
            try:
                msg = self.message_at(phys)
            except (StoreError, MessageFormatError):
                continue  # an entry the log was cut under (a crash, a truncation): no message
            if msg.topic == topic and key in msg.index_keys:
                out.append(msg)
            if len(out) >= max_num:
                break
        return out
