"""The slave side of classic HA (S2/S3), sans-IO.

The master streams raw bytes; a chunk may end in the middle of a message. The slave keeps
the unfinished tail and asks its driver to append the longest whole-message prefix, so
the store only ever holds whole messages. Positions: `max_offset` is the end of what the
store holds, `expect` the next byte the master will send. They differ by the pending tail,
or (after an end-of-segment blank) the store may be ahead of `expect` by padding bytes,
which are skipped as they arrive.

S3 (checkpoint): a report is an ack the consistent checkpoint counts, so it names only
what the slave has flushed (`flushed`). Appended bytes are flushed by group commit: one
Flush at a time; what arrives while it runs shares the next one, and each finished flush
is reported once. A slave that reconnects with an unflushed tail reports its flushed end:
the master resends from there and the slave skips the bytes it holds.
"""
from __future__ import annotations

from .actions import (
    CHECKPOINT_FRAME, REFILL_FRAME, Append, Connect, Disconnect, Flush, HAConfig, Report, StartAt,
    StoreCheckpoint,
)
from .refill import SendLog

# Known bugs the simulator must catch (`--inject-bug`).
BUGS = {
    "slave-reports-unflushed": "a checkpoint-mode slave reports what it appended, flushed "
                               "or not",
}


class HASlave:
    def __init__(self, config: HAConfig, max_offset: int, now: int, *,
                 reconnect_ms: int = 1000, flushed: int | None = None, bug: str | None = None):
        self.config = config
        self.max_offset = max_offset
        # S3: what is on disk (the report) and whether a Flush is under way
        self.flushed = max_offset if flushed is None else min(flushed, max_offset)
        self.flushing = False
        self.bug = bug
        self.expect = max_offset
        self.pending = b""
        self.connected_now = False
        self.heard_at = self.reported_at = now
        self.down_since = now - reconnect_ms
        self.reconnect_ms = reconnect_ms
        self.checkpoint = 0

    def connected(self, now: int) -> list[object]:
        self.connected_now = True
        self.heard_at = now
        # the master sends from what we report: the bytes we hold past it are skipped
        report = self._report(now, hello=not self.config.checkpoint)
        self.expect, self.pending = report.offset, b""
        return [report] + self._flush()

    def disconnected(self, now: int) -> list[object]:
        self.connected_now = False
        self.down_since = now
        self.expect, self.pending = self.max_offset, b""
        return []

    def _report(self, now: int, hello: bool = False) -> Report:
        self.reported_at = now
        durable = self.config.checkpoint and self.bug != "slave-reports-unflushed"
        return Report(self.flushed if durable else self.max_offset, hello)

    def _flush(self) -> list[object]:
        if not self.config.checkpoint or self.flushing or self.flushed >= self.max_offset:
            return []
        self.flushing = True
        return [Flush(self.max_offset)]

    def flushed_to(self, offset: int, now: int) -> list[object]:
        """S3: the driver's flush (from Flush) made the log durable up to `offset`."""
        self.flushing = False
        if offset > self.flushed:
            self.flushed = min(offset, self.max_offset)
            return [self._report(now)] + self._flush()
        return self._flush()

    def frame(self, offset: int, size: int, body: bytes, now: int) -> list[object]:
        """A header (and body) from the master."""
        self.heard_at = now
        if size == REFILL_FRAME:  # a recovering master asks for what it lost (refill.py)
            return [SendLog(offset, self.max_offset)] if offset < self.max_offset else []
        if size == CHECKPOINT_FRAME:
            if offset > self.checkpoint:
                self.checkpoint = offset
                return [StoreCheckpoint(offset)]
            return []
        out: list[object] = []
        if self.max_offset == 0 and self.expect == 0 and offset > 0:
            # an empty slave starts where the master began sending (its last segment)
            if offset % self.config.segment_size:
                return self._drop(f"first chunk at {offset} is not at a segment start")
            self.max_offset = self.expect = offset
            out.append(StartAt(offset))
        if offset != self.expect:
            return self._drop(f"master sent offset {offset}, slave expected {self.expect}")
        if size == 0:
            return out
        body = bytes(body)
        self.expect = offset + len(body)
        skip = max(0, self.max_offset - offset - len(self.pending))
        if skip >= len(body) and not self.pending:
            return out + [self._report(now)]  # padding of a segment we have finished
        self.pending = self.pending + body[skip:]
        out.append(Append(self.max_offset, self.pending))
        return out

    def appended(self, new_max: int, now: int) -> list[object]:
        """The driver appended whole messages up to `new_max` (from Append)."""
        used = new_max - self.max_offset
        self.pending = self.pending[used:] if used < len(self.pending) else b""
        self.max_offset = new_max
        if self.config.checkpoint:
            return self._flush()  # reported once flushed
        return [self._report(now)]

    def _drop(self, reason: str) -> list[object]:
        self.connected_now = False
        self.expect, self.pending = self.max_offset, b""
        return [Disconnect(reason)]

    def tick(self, now: int) -> list[object]:
        cfg = self.config
        if not self.connected_now:
            if now - self.down_since >= self.reconnect_ms:
                self.down_since = now
                return [Connect()]
            return []
        if now - self.heard_at >= cfg.housekeeping_ms:
            self.connected_now = False
            self.down_since = now
            return [Disconnect(f"nothing from the master for {cfg.housekeeping_ms} ms")]
        if now - self.reported_at >= cfg.heartbeat_ms:
            return [self._report(now)]
        return []
