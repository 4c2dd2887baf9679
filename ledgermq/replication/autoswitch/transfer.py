"""Commit-log transfer between brokers in controller mode (S1-4 … S1-6), sans-IO: the
classic HA cores (replication/ha) with epochs.

Handshake: a slave connects and says who it is (and whether it is an asynchronous learner,
and whether an empty log should start at the master's last segment); the master answers
with its epoch list and log end; the slave cuts its log where the two histories part
(`truncate_point`) and only then reports its offset. Transfer: chunks never cross an
epoch boundary and carry the epoch, its start offset and the confirm offset (what the whole
SyncStateSet holds); a slave records a new epoch the moment a chunk's epoch changes.
Acknowledgement follows the SyncStateSet (SyncStateTracker); a change of the set is a
proposal to the controller.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import cast

from ..ha.actions import Complete, Disconnect, HAConfig, Heartbeat, SyncStatus, Transfer
from ..ha.master import HAMaster, Link
from ..ha.slave import HASlave
from .epochs import truncate_point
from .sync_state import SyncStateTracker

# ---- actions -----------------------------------------------------------------------
@dataclass(frozen=True)
class SendEpochs:
    link: int
    epochs: tuple[tuple[int, int], ...]
    log_end: int


@dataclass(frozen=True)
class EpochTransfer:
    link: int
    offset: int
    size: int
    epoch: int
    epoch_start: int
    confirm: int


@dataclass(frozen=True)
class SendHandshake:
    slave_id: int
    learner: bool
    from_last_file: bool


@dataclass(frozen=True)
class TruncateLog:
    offset: int  # cut the commit log and the epoch file here (crash-safely)


@dataclass(frozen=True)
class RecordEpoch:
    epoch: int
    start: int


@dataclass(frozen=True)
class Confirmed:
    offset: int  # what every SyncStateSet member holds: consumers may see up to here


class AutoSwitchMaster(HAMaster):
    def __init__(self, config: HAConfig, epochs: list[tuple[int, int]], log_start: int,
                 log_end: int, tracker: SyncStateTracker, now: int):
        super().__init__(config, log_end, now)
        self.epochs = list(epochs)
        self.log_start = log_start
        self.tracker = tracker
        self.handshaken: dict[int, tuple[int, bool, bool]] = {}  # link -> id, learner, last

    def handshake(self, link: int, slave_id: int, learner: bool, from_last_file: bool,
                  now: int) -> list[object]:
        if link not in self.links:
            return []
        self.handshaken[link] = (slave_id, learner, from_last_file)
        self.links[link].slave_id = slave_id
        if learner:
            self.tracker.learners = self.tracker.learners | {slave_id}
        return [SendEpochs(link, tuple(self.epochs), self.log_end)]

    def report(self, link: int, offset: int, now: int, slave_id: int | None = None,
               log_begin: int = 0, epoch: int = 0) -> list[object]:
        # (log_begin, epoch: S3's, unused: the handshake stands for both here)
        ln = self.links.get(link)
        if ln is None or link not in self.handshaken:
            return []  # a report before the handshake is not an ack of anything
        sid, _, from_last = self.handshaken[link]
        if ln.push is None and offset == 0 and not from_last:
            ln.push = ln.base = self.log_start  # an empty slave copies the whole log
        out = self.tracker.ack(sid, min(offset, self.log_end), now) \
            if 0 <= offset <= self.log_end else []
        return out + super().report(link, offset, now, sid)

    def appended(self, end: int, now: int) -> list[object]:
        self.tracker.appended(end)
        return super().appended(end, now) + self._complete_covered()

    def sync(self, request_id: int, end: int, now: int) -> list[object]:
        ok = self.tracker.acknowledged(end)
        if ok is None:
            return [Complete(request_id, SyncStatus.NOT_ENOUGH_REPLICAS)]
        if ok:
            return [Complete(request_id, SyncStatus.OK)]
        self.waiters.append((end, now + self.config.sync_timeout_ms, request_id))
        return []

    def set_changed(self) -> list[object]:
        """The SyncStateSet changed (the controller answered): a smaller set may cover
        writes that waited for a member that left."""
        return self._complete_covered()

    def _complete_covered(self) -> list[object]:
        out: list[object] = []
        while self.waiters and self.tracker.acknowledged(self.waiters[0][0]):
            out.append(Complete(self.waiters.popleft()[2], SyncStatus.OK))
        return out

    def tick(self, now: int) -> list[object]:
        """Heartbeats carry the epoch and the confirm offset too (S1-6)."""
        out: list[object] = list(self.tracker.tick(now))
        for a in super().tick(now):
            if isinstance(a, Heartbeat):
                self._transferred(a.link, now)
                epoch, start = self._epoch_at(a.offset)
                a = EpochTransfer(a.link, a.offset, 0, epoch, start,
                                  self.tracker.confirm_offset)
            out.append(a)
        return out

    def _epoch_at(self, offset: int) -> tuple[int, int]:
        k = bisect.bisect_right([s for _, s in self.epochs], offset) - 1
        return self.epochs[max(k, 0)] if self.epochs else (0, 0)

    def _push(self, link: int, ln: Link, now: int) -> list[EpochTransfer]:
        """As HAMaster's push, with each chunk ending at the next epoch's start."""
        out: list[EpochTransfer] = []
        starts = [s for _, s in self.epochs]
        for t in cast("list[Transfer]", super()._push(link, ln, now)):  # (Transfers only)
            offset, size = t.offset, t.size
            while size > 0:
                k = bisect.bisect_right(starts, offset) - 1
                epoch, start = self.epochs[max(k, 0)]
                stop = starts[k + 1] if k + 1 < len(starts) else offset + size
                n = min(size, stop - offset)
                out.append(EpochTransfer(link, offset, n, epoch, start,
                                         self.tracker.confirm_offset))
                offset, size = offset + n, size - n
        if out:
            self._transferred(link, now)
        return out

    def _transferred(self, link: int, now: int) -> None:
        sid = self.handshaken.get(link, (None,))[0]
        if sid is not None:
            self.tracker.transferred(sid, now)


class AutoSwitchSlave(HASlave):
    def __init__(self, config: HAConfig, slave_id: int, epochs: list[tuple[int, int]],
                 max_offset: int, now: int, *, learner: bool = False,
                 from_last_file: bool = False, bug: str | None = None):
        super().__init__(config, max_offset, now)
        self.slave_id = slave_id
        self.epochs = list(epochs)
        self.learner = learner
        self.from_last_file = from_last_file
        self.bug = bug
        self.confirmed = 0
        self.ready = False  # reports start once the handshake truncation is done

    def connected(self, now: int) -> list[object]:
        self.ready = False
        super().connected(now)  # its report waits for the master's epochs
        return [SendHandshake(self.slave_id, self.learner, self.from_last_file)]

    def master_epochs(self, epochs: list[tuple[int, int]], master_end: int,
                      now: int) -> list[object]:
        """S1-5: cut where our history and the master's part, then start copying."""
        point = truncate_point(self.epochs, self.max_offset, list(epochs), master_end,
                               bug=self.bug)
        out: list[object] = []
        if point is None:  # nothing in common: start over, empty
            point = 0
        if point < self.max_offset:
            out.append(TruncateLog(point))
            self.epochs = [e for e in self.epochs if e[1] < point]
            self.max_offset = point
        self.expect, self.pending = self.max_offset, b""
        self.ready = True
        return out + [self._report(now)]

    def data(self, offset: int, size: int, epoch: int, epoch_start: int, confirm: int,
             body: bytes, now: int) -> list[object]:
        if not self.ready:
            return []
        acts = self.frame(offset, size, body, now)
        if any(isinstance(a, Disconnect) for a in acts):
            return acts
        if size > 0 and (not self.epochs or epoch > self.epochs[-1][0]):
            self.epochs.append((epoch, epoch_start))
            acts.insert(0, RecordEpoch(epoch, epoch_start))  # before its first bytes land
        if confirm > self.confirmed:
            self.confirmed = confirm
            acts.append(Confirmed(confirm))
        return acts

    def tick(self, now: int) -> list[object]:
        return super().tick(now) if self.ready or not self.connected_now else []
