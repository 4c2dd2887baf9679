"""Background flushing: periodic (ASYNC_FLUSH) or group commit (SYNC_FLUSH).

Group commit: writers register the end offset of their write and wait on a future; the
flush thread takes the current end of the log, fsyncs once, and completes every waiter at
or below it. Many concurrent writers share one fsync. The futures are
concurrent.futures.Future, so blocking threads and asyncio (asyncio.wrap_future) can wait.

Consume queues, index and checkpoint are flushed by a second thread (every
`rest_interval_ms`, and after every `rest_every_bytes` of log): their fsyncs (one per
queue file) would otherwise hold up the commit log's group commit each time.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable

from ..metrics.histogram import FLUSH_LATENCY_MS, Histogram
log = logging.getLogger(__name__)

# Under group commit, an fsync finishing while the event loop runs Python waits for the GIL
# until the loop yields it (by default after up to 5 ms): the next fsync then starts only
# once every released writer has appended again, instead of overlapping with them. A
# shorter interval (process-wide) lets it start promptly: ~10-15% more acknowledged
# messages per second with 64 writers here.
GROUP_COMMIT_SWITCH_INTERVAL_S = 0.0005


class FlushService:
    def __init__(self, flush_log: Callable[[], int], flush_rest: Callable[[], None], *,
                 group_commit: bool, log_interval_ms: int, rest_interval_ms: int,
                 rest_every_bytes: int = 16 << 20, name: str = "ledgermq-flush"):
        self._flush_log = flush_log  # fsyncs the commit log; returns the flushed offset
        self._flush_rest = flush_rest  # consume queues, index, checkpoint
        # the checkpoint also follows volume, so recovery never scans more than about this
        self._rest_every_bytes = rest_every_bytes
        self._rest_at_offset = 0
        self._group_commit = group_commit
        self._log_interval = log_interval_ms / 1000
        self._rest_interval = rest_interval_ms / 1000
        self._cond = threading.Condition()
        self._waiters: list[tuple[int, Future]] = []
        # the flush thread was asked for a flush and has not yet read the log's end for it:
        # that flush covers every write made before the flag was seen set, so writers
        # that see it set need not ask again (set under the lock, cleared under it)
        self._woken = False
        self._listeners: list[Callable[[int], None]] = []  # told of every flush
        self._stop = False
        self.flushed_offset = 0
        self.rounds = 0  # flushes that made more of the log durable
        self.latency = Histogram(FLUSH_LATENCY_MS)  # ms of each such flush (for metrics)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._rest_due = threading.Event()  # set: flush the rest now (volume, or stopping)
        self._rest_stop = False  # set once the log thread made its last flush
        self._rest_thread = threading.Thread(target=self._run_rest, name=f"{name}-rest",
                                             daemon=True)

    def start(self, flushed_offset: int) -> None:
        self.flushed_offset = self._rest_at_offset = flushed_offset
        if self._group_commit and sys.getswitchinterval() > GROUP_COMMIT_SWITCH_INTERVAL_S:
            sys.setswitchinterval(GROUP_COMMIT_SWITCH_INTERVAL_S)
        self._thread.start()
        self._rest_thread.start()

    def request(self, end_offset: int) -> Future:
        """A future completed (with the flushed offset) once `end_offset` is durable."""
        fut: Future = Future()
        with self._cond:
            if end_offset <= self.flushed_offset:
                fut.set_result(self.flushed_offset)
                return fut
            self._waiters.append((end_offset, fut))
            self._woken = True
            self._cond.notify()
        return fut

    def wakeup(self) -> None:
        """Have a flush start soon; it covers every write made before this call."""
        if self._woken:
            return  # the flush about to start covers this write: no lock, no notify
        with self._cond:
            self._woken = True
            self._cond.notify()

    def lower_to(self, offset: int) -> None:
        """The log was cut below what was flushed: forget the flushes above the cut."""
        with self._cond:
            self.flushed_offset = min(self.flushed_offset, offset)
            self._rest_at_offset = min(self._rest_at_offset, offset)

    def add_listener(self, fn: Callable[[int], None]) -> None:
        self._listeners.append(fn)

    def _run(self) -> None:
        # unasked, group commit still flushes every 10 ms (cheap when nothing is new)
        idle = min(self._log_interval, 0.01) if self._group_commit else self._log_interval
        while True:
            with self._cond:
                if not self._stop and not self._woken:
                    self._cond.wait(idle)
                stopping = self._stop
                self._woken = False  # before the flush reads the log's end
            self._flush_once()
            if self.flushed_offset - self._rest_at_offset >= self._rest_every_bytes:
                self._rest_due.set()
            if stopping:
                return

    def _run_rest(self) -> None:
        while True:
            self._rest_due.wait(self._rest_interval)
            self._rest_due.clear()
            stopping = self._rest_stop
            self._rest_at_offset = self.flushed_offset
            try:
                self._flush_rest()
            except OSError as e:  # a full disk: a line each round, not a traceback
                log.error("flushing consume queues / checkpoint failed: %s", e)
            except Exception:
                log.exception("flushing consume queues / checkpoint failed")
            if stopping:
                return

    def _flush_once(self) -> None:
        started = time.perf_counter()
        try:
            flushed = self._flush_log()
            self.error = None
        except OSError as e:  # e.g. EIO: waiters time out, the log says why
            if self.error is None:
                log.error("commit log fsync failed: %s", e)
            self.error = e
            return
        for listener in self._listeners:
            listener(flushed)
        with self._cond:
            if flushed > self.flushed_offset:
                self.rounds += 1
                self.latency.observe((), (time.perf_counter() - started) * 1000)
            self.flushed_offset = flushed
            if not self._waiters:
                return
            done = [w for w in self._waiters if w[0] <= flushed]
            self._waiters = [w for w in self._waiters if w[0] > flushed]
        for _, fut in done:
            if not fut.done():
                fut.set_result(flushed)

    def stop(self) -> None:
        """Stop both threads; their last rounds flush the log, then the rest."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._rest_stop = True
        self._rest_due.set()
        if self._rest_thread.is_alive():
            self._rest_thread.join(timeout=30)


class LoopFlushWaiters:
    """The asyncio side of group commit for one event loop.

    Writers await a plain loop future; the flush thread hops into the loop once per flush
    round (not once per writer) to release every waiter the flush covered. Waiters share
    one timeout sweep instead of a timer each.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, service: FlushService,
                 timeout_s: float, on_timeout: Callable[[object], None] = lambda _: None):
        self.loop = loop
        self._service = service
        self._timeout = timeout_s
        self._on_timeout = on_timeout  # told of a result whose flush timed out
        self._waiters: deque[tuple[int, float, asyncio.Future, object]] = deque()
        self._sweeping = False
        service.add_listener(self._on_flushed)

    def wait(self, end_offset: int, result=None) -> asyncio.Future:
        """A future: True once `end_offset` is flushed, False after the timeout. Given a
        `result`, the future gives it back either way (after on_timeout(result) on a
        timeout): a writer then awaits one future, no coroutine around it."""
        fut = self.loop.create_future()
        service = self._service
        if end_offset <= service.flushed_offset:
            fut.set_result(True if result is None else result)
            return fut
        self._waiters.append((end_offset, time.monotonic() + self._timeout, fut, result))
        service.wakeup()
        if not self._sweeping:
            self._sweeping = True
            self.loop.call_later(min(self._timeout, 0.05), self._sweep)
        return fut

    def _on_flushed(self, flushed: int) -> None:  # flush thread
        if self._waiters and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._release, flushed)

    def _release(self, flushed: int) -> None:
        w = self._waiters
        while w and w[0][0] <= flushed:
            _, _, fut, result = w.popleft()
            if not fut.done():
                fut.set_result(True if result is None else result)

    def _sweep(self) -> None:
        self._release(self._service.flushed_offset)
        now = time.monotonic()
        w = self._waiters
        while w and w[0][1] <= now:
            _, _, fut, result = w.popleft()
            if fut.done():
                continue
            if result is None:
                fut.set_result(False)
            else:
                self._on_timeout(result)
                fut.set_result(result)
        self._sweeping = bool(w)
        if self._sweeping:
            self.loop.call_later(min(self._timeout, 0.05), self._sweep)
