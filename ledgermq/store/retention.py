"""Retention and disk space: commit-log segments past fileReservedTime are deleted with
the queue and index entries below them, and writes are refused while the disk is fuller
than diskMaxUsedSpaceRatio. A background thread deletes every cleanResourceInterval and
measures the disk every second (a statvfs): a disk filling up is refused writes, and a
replicated master hands its group over (broker/modes/disk_handover.py), within a second,
not at the next round (RocketMQ's 10 s); space coming back is noticed as soon.
"""
from __future__ import annotations

import logging
import shutil
import time

log = logging.getLogger(__name__)

MEASURE_EVERY_S = 1.0  # how often the disk's use is measured


class Retention:
    """Mixed into MessageStore."""

    def _update_disk_usage(self) -> None:
        usage = shutil.disk_usage(self.commitlog.dir)
        self.disk_used_ratio = 100.0 * (usage.total - usage.free) / usage.total
        full = self.disk_used_ratio > self.config.diskMaxUsedSpaceRatio
        if full and not self.disk_full:
            log.error("disk %.1f%% used, above diskMaxUsedSpaceRatio=%s: refusing writes",
                      self.disk_used_ratio, self.config.diskMaxUsedSpaceRatio)
        elif self.disk_full and not full:
            log.warning("disk %.1f%% used, within diskMaxUsedSpaceRatio=%s: accepting writes "
                        "again", self.disk_used_ratio, self.config.diskMaxUsedSpaceRatio)
        self.disk_full = full  # a write that hits ENOSPC again sets it again
        self.disk_full_reason = ""

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
        last = time.monotonic()
        while not self._cleaner_stop.wait(min(interval, MEASURE_EVERY_S)):
            try:
                if self.disk_full or time.monotonic() - last >= interval:
                    last = time.monotonic()
                    self.delete_expired()
                self._update_disk_usage()
            except Exception:
                log.exception("retention round failed")
