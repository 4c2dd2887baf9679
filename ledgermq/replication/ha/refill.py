"""A classic-HA master (S2) that restarts refills its log from its slaves before it
takes a write, sans-IO (an ASYNC_MASTER waits for the window only: `need_slave` False).

Why: a SYNC_MASTER acknowledges a send once a slave holds it, but under ASYNC_FLUSH its
own copy may be in the page cache only. A power cut (or damage its CRCs find on restart)
shortens the master's log; the slave still holds the acknowledged messages. Without a
refill the slave reports an offset past the master's end and is refused, and the master
writes new messages over the offsets the acknowledged ones had: they are gone.

Rule: for `wait_ms` after it starts, a master is recovering. A slave reporting an offset
past the master's end is asked for its bytes from there (one slave at a time, the
others waiting their turn), and the master appends them as a slave appends its
master's. Once the window has passed, no refill is under way and (if `need_slave`: the
master had slaves before it restarted) a slave has reported, the master is recovered and
may take writes. A SYNC_MASTER whose slaves are all gone waits for one: it could not
acknowledge a write without one anyway. Every slave's log is a prefix of the one log the master
had before it restarted (S2 has a single master, never replaced), so any slave's bytes
past the master's end are the master's own lost bytes.

What it cannot do: a slave that is away for the whole window and holds more than every
slave that reported is refused afterwards (as before), with what only it held.
"""
from __future__ import annotations

from dataclasses import dataclass

# Known bugs the simulator must catch (`--inject-bug`).
BUGS = {"no-refill": "a restarted SYNC_MASTER takes writes after its wait without asking "
                     "its slaves for what it lost"}


@dataclass(frozen=True)
class AskRefill:
    """Ask the slave on `link` for its log from `offset` (a REFILL_FRAME header)."""
    link: int
    offset: int


@dataclass(frozen=True)
class RefillAppend:
    """Append the longest whole-message prefix of `data` at `offset` to the master's own
    log, then call HAMaster.refill_appended(new end)."""
    offset: int
    data: bytes


@dataclass(frozen=True)
class SendLog:
    """Slave action: send the master your log from `offset` to `end` (refill frames)."""
    offset: int
    end: int


@dataclass(frozen=True)
class Recovered:
    """The master may take writes: its log is at least as long as every slave's that
    reported within the window."""
    log_end: int


class Recovery:
    def __init__(self, now: int, wait_ms: int, need_slave: bool = True,
                 bug: str | None = None):
        self.until = now + wait_ms
        self.bug = bug
        # a slave reported no more than we hold, or refilled us to its end (or none is
        # needed); a slave gone mid-refill does not count
        self.heard = not need_slave
        self.wanted: dict[int, int] = {}  # link -> the offset it reported past our end
        self.source: int | None = None  # the link refilling us now
        self.expect = 0  # the next byte the source will send
        self.pending = b""  # its bytes not yet appended (an unfinished message)
        self.done = False

    def reported(self, link: int, offset: int, log_end: int) -> list[object]:
        """A slave reported `offset` (its log end)."""
        if offset <= log_end or self.bug == "no-refill":
            self.heard = True
            return []
        self.wanted[link] = offset
        return self._next(log_end)

    def _next(self, log_end: int) -> list[object]:
        if self.source is not None:
            return []
        for link, offset in sorted(self.wanted.items(), key=lambda kv: -kv[1]):
            if offset > log_end:
                self.source, self.expect, self.pending = link, log_end, b""
                return [AskRefill(link, log_end)]
        return []

    def data(self, link: int, offset: int, body: bytes, log_end: int) -> list[object]:
        """Bytes from a refilling slave; bytes out of turn or out of place end its turn."""
        if link != self.source or offset != self.expect:
            return self.gone(link, log_end)
        self.expect += len(body)
        self.pending += body
        # what we already hold is skipped: padding past a segment's last message, which
        # the store filled when it appended that message's segment end
        skip = max(0, log_end - (self.expect - len(self.pending)))
        self.pending = self.pending[skip:]
        if not self.pending:
            return self._finished(log_end)
        return [RefillAppend(log_end, self.pending)]

    def appended(self, old_end: int, new_end: int) -> list[object]:
        """The driver appended whole messages from old_end to new_end."""
        self.pending = self.pending[new_end - old_end:]
        return self._finished(new_end)

    def _finished(self, log_end: int) -> list[object]:
        """The source's turn ends once we hold all it reported."""
        if self.source is None or log_end < self.wanted.get(self.source, 0):
            return []
        self.wanted.pop(self.source, None)
        self.source, self.pending, self.heard = None, b"", True
        return self._next(log_end)

    def gone(self, link: int, log_end: int) -> list[object]:
        """The link closed (or misbehaved): it refills us no more."""
        self.wanted.pop(link, None)
        if link == self.source:
            self.source, self.pending = None, b""
            return self._next(log_end)
        return []

    def tick(self, now: int, log_end: int) -> list[object]:
        if not self.done and now >= self.until and self.source is None and self.heard:
            self.done = True
            return [Recovered(log_end)]
        return []
