"""The master side of classic HA (S2) and of the consistent checkpoint (S3), sans-IO.

Links are the driver's connection ids. Each link has a push pointer (the next byte to
send) and an acked offset (the slave's last report). Bytes are pushed as far as
`window` past the ack, in chunks that never cross a segment end.

S2 (SYNC_MASTER): a sync request completes OK once any slave acked its end offset;
SLAVE_NOT_AVAILABLE at once with no slave or the best slave behind by more than
`fallbehind_max`; TIMEOUT after `sync_timeout_ms`.

S3 (checkpoint): the consistent checkpoint is the minimum acked offset over the member
slaves (persisted with the checkpoint). It never moves back. A slave becomes a member once
it has acked the current checkpoint; a member away for `member_timeout_ms`, or whose copy
is gone, is dropped once the control node saved that (see `members`), and only then does
the checkpoint move past it. A new checkpoint (or membership) is first saved
(SaveCheckpoint); only once the driver says it is durable (`checkpoint_saved`) is it
`saved`: published to the slaves, reported to the control node and counted for the writes
waiting on it. The saved file seeds a restart in the same epoch, so nothing anyone was
told can then be forgotten. A master leads one epoch, and takes reports only from slaves
that follow that epoch (a slave of another epoch has not been cut to its takeover).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .actions import (
    Close, Complete, HAConfig, Heartbeat, PublishCheckpoint, SaveCheckpoint, SyncStatus, Transfer,
)
from .members import BUGS as MEMBER_BUGS
from .members import Membership
from .refill import BUGS as REFILL_BUGS
from .refill import Recovered, Recovery

# Known bugs the simulator must catch (`--inject-bug`).
BUGS = {
    "ack-on-master-write": "SYNC_MASTER answers OK after the master's own write",
    "checkpoint-max": "the consistent checkpoint is the max, not the min, of the slave acks",
    **MEMBER_BUGS,
    **REFILL_BUGS,
}


@dataclass
class Link:
    heard_at: int
    sent_at: int
    push: int | None = None  # next byte to send; None until the first report
    base: int = 0  # where pushing started
    acked: int = -1
    slave_id: int | None = None
    reported: int = -1  # its last report (while the master recovers: maybe past our end)


class HAMaster:
    def __init__(self, config: HAConfig, log_end: int, now: int, *, checkpoint: int = 0,
                 members: dict[int, int] | None = None, epoch: int = 0,
                 recover_ms: int | None = None, had_slaves: bool = True,
                 bug: str | None = None):
        self.config = config
        # S2 SYNC_MASTER: refill from the slaves before the first write (refill.py)
        self.recovery = None if recover_ms is None else \
            Recovery(now, recover_ms, had_slaves, bug)
        self._refill_source: int | None = None  # the refilling link as the last tick saw it
        self._refill_since = now  # when it was asked, or last sent bytes
        self.epoch = epoch  # S3: the epoch this master leads
        self.log_end = log_end
        self.links: dict[int, Link] = {}
        self.waiters: deque[tuple[int, int, int]] = deque()  # (end, deadline, request id)
        self.checkpoint = checkpoint
        self.saved = checkpoint  # S3: what the driver saved durably (given as durable)
        # a slave joins once it holds the log as it was when this master began: the
        # checkpoint it got may lag what was acknowledged (an earlier master's last
        # advance, unreported when it failed), but every member holds that
        self.join_floor = log_end
        self.membership = Membership(members or {}, now, config.member_timeout_ms, bug)
        self.members = self.membership.acks  # slave id -> acked offset, for the min
        self._saved_members: tuple[int, ...] | None = None  # who the last SaveCheckpoint named
        self.bug = bug
        self.now = now

    # ---- links --------------------------------------------------------------------
    def connected(self, link: int, now: int) -> list[object]:
        self.links[link] = Link(heard_at=now, sent_at=now)
        return []

    def disconnected(self, link: int) -> list[object]:
        self.links.pop(link, None)
        if self.recovering:
            assert self.recovery is not None
            return self.recovery.gone(link, self.log_end)
        return []

    @property
    def recovering(self) -> bool:
        return self.recovery is not None and not self.recovery.done

    def report(self, link: int, offset: int, now: int, slave_id: int | None = None,
               log_begin: int = 0, epoch: int = 0) -> list[object]:
        """A slave's max-offset report (its heartbeat and its ack). `log_begin`: where the
        master's log starts (a segment start; retention moves it). S3: `epoch`, the epoch
        whose master the slave follows."""
        self.now = now
        ln = self.links.get(link)
        if ln is None:
            return []
        ln.heard_at = now
        if self.config.checkpoint and epoch != self.epoch:
            # its log was cut to the takeover of its own epoch, not ours: past a later
            # takeover it may hold bytes ours does not. Its view (and truncation) comes
            # from the control node; only then is its offset an ack of our log
            self.links.pop(link)
            return [Close(link, f"slave follows epoch {epoch}, this master leads epoch "
                                f"{self.epoch}: it must take its view first")]
        rec = self.recovery if self.recovering else None
        if rec is not None and link in rec.wanted and offset <= self.log_end \
                and link != rec.source:
            # it once reported a log past ours, unchecked (a fork check needs our bytes);
            # we hold that far now, from another slave: it reconnects to be checked
            del self.links[link]
            return [Close(link, "its log went past ours and was not what we copied: it "
                                "reconnects to be checked against ours")] + \
                rec.gone(link, self.log_end)
        ln.reported = offset
        if rec is not None:
            asks = rec.reported(link, offset, self.log_end)
            if offset > self.log_end:
                return asks
        if offset > self.log_end or offset < 0:
            self.links.pop(link)
            return [Close(link, f"slave reports offset {offset} but the master's log ends at "
                                f"{self.log_end}: it holds data the master does not")]
        if ln.push is None:
            if offset:
                start = offset
            elif self.config.checkpoint:
                # S3: a member holds the master's log, so an empty slave copies all of it
                start = log_begin
            else:  # S2, as RocketMQ: an empty slave copies only the master's last segment
                start = self.log_end - self.log_end % self.config.segment_size
            ln.push = ln.base = start
            ln.slave_id = slave_id
        ln.acked = max(ln.acked, offset)
        out: list[object] = []
        if self.config.checkpoint and ln.slave_id is not None:
            out += self._advance_checkpoint(ln)
        out += self._complete_covered()
        out += self._push(link, ln, now)
        return out

    # ---- recovery (S2 SYNC_MASTER) -------------------------------------------------
    def refill_data(self, link: int, offset: int, body: bytes, now: int) -> list[object]:
        """Bytes of its log a slave sent back, as asked (AskRefill)."""
        self.now = now
        if link not in self.links:
            return []
        if not self.recovering:
            self.links.pop(link)
            return [Close(link, "slave sent log bytes the master did not ask for")]
        self._refill_since = now
        assert self.recovery is not None
        return self.recovery.data(link, offset, body, self.log_end)

    def refill_appended(self, end: int, now: int) -> list[object]:
        """The driver appended a RefillAppend's whole messages: our log ends at `end`."""
        assert self.recovery is not None  # (a RefillAppend comes from it)
        old, self.log_end = self.log_end, end
        return self.recovery.appended(old, end) + self.appended(end, now)

    def end_recovery(self, now: int) -> list[object]:
        """An operator accepts the risk: writes start now, without what the slaves may
        still hold past our end (a slave that reports more is refused from then on)."""
        if not self.recovering:
            return []
        assert self.recovery is not None
        self.recovery.done = True
        return [Recovered(self.log_end)] + self._recovered(now)

    def _refill_stalled(self, now: int) -> list[object]:
        """A refilling slave that sent nothing for housekeeping_ms (its ask or its bytes
        lost on the way) loses its turn and its link: a fresh connection reports again and
        is asked again, instead of the master waiting for it for good (#34)."""
        assert self.recovery is not None  # (only while recovering)
        src = self.recovery.source
        if src != self._refill_source:
            self._refill_source, self._refill_since = src, now
            return []
        if src is None or now - self._refill_since < self.config.housekeeping_ms:
            return []
        self._refill_source = None
        self.links.pop(src, None)
        return [Close(src, f"refill stalled: nothing for {self.config.housekeeping_ms} ms")] + \
            self.recovery.gone(src, self.log_end)

    def _recovered(self, now: int) -> list[object]:
        """Pushing starts for the slaves that reported while we recovered. A slave that
        reported a log past ours and was not the one we copied is closed instead: its bytes
        past our old end were never checked against ours (a fork check needs the bytes),
        so it reconnects and its log is checked against what we hold now."""
        assert self.recovery is not None  # (only once it recovered)
        out: list[object] = []
        for link in [k for k in self.recovery.wanted if k in self.links]:
            del self.links[link]
            out.append(Close(link, "its log went past ours and was not what we copied: "
                                   "it reconnects to be checked against ours"))
        for link, ln in self.links.items():
            if ln.push is None and 0 <= ln.reported <= self.log_end:
                out += self.report(link, ln.reported, now, ln.slave_id)
        return out

    # ---- local writes -------------------------------------------------------------
    def appended(self, end: int, now: int) -> list[object]:
        """The master's log now ends at `end`: push to every slave that is waiting."""
        self.log_end = end
        self.now = now
        out: list[object] = []
        for link, ln in self.links.items():
            out += self._push(link, ln, now)
        return out

    def sync(self, request_id: int, end: int, now: int) -> list[object]:
        """Wait until the write ending at `end` is covered (see the module doc)."""
        self.now = now
        if self.recovering:  # (the broker takes no write before Recovered)
            return [Complete(request_id, SyncStatus.SLAVE_NOT_AVAILABLE)]
        if self.bug == "ack-on-master-write":
            return [Complete(request_id, SyncStatus.OK)]
        if self._covered() >= end:
            return [Complete(request_id, SyncStatus.OK)]
        if not self.config.checkpoint and not self._slave_ok():
            return [Complete(request_id, SyncStatus.SLAVE_NOT_AVAILABLE)]
        self.waiters.append((end, now + self.config.sync_timeout_ms, request_id))
        return []

    def _slave_ok(self) -> bool:
        acks = [ln.acked for ln in self.links.values() if ln.acked >= 0]
        return bool(acks) and self.log_end - max(acks) <= self.config.fallbehind_max

    def _covered(self) -> int:
        if self.config.checkpoint:
            return self.saved
        return max((ln.acked for ln in self.links.values()), default=-1)

    def _complete_covered(self) -> list[object]:
        covered = self._covered()
        out: list[object] = []
        while self.waiters and self.waiters[0][0] <= covered:
            out.append(Complete(self.waiters.popleft()[2], SyncStatus.OK))
        return out

    # ---- S3 checkpoint ------------------------------------------------------------
    def _advance_checkpoint(self, ln: Link) -> list[object]:
        assert ln.slave_id is not None  # (only for a named slave)
        self.membership.reported(ln.slave_id, ln.acked, max(self.checkpoint, self.join_floor),
                                 self.now)
        return self._recompute()

    def proposal(self) -> tuple[int, tuple[int, ...]]:
        """(version, member ids): what the control node must save before a leaving member
        is dropped (the master heartbeats it)."""
        return self.membership.proposal()

    def members_saved(self, version: int, ids: Iterable[int], now: int) -> list[object]:
        """The control node saved proposal `version` (naming `ids`): drop the leaving
        members it no longer names; the checkpoint may then move past them."""
        self.now = now
        if not self.membership.saved(version, ids):
            return []
        return self._recompute()

    def _recompute(self) -> list[object]:
        """Save a checkpoint that moved, or a membership that changed; nothing is
        published or counted before `checkpoint_saved`."""
        floor = self.membership.floor()
        if floor is None:
            return []  # no member: nothing but the control node's cache acknowledges
        if self.bug == "checkpoint-max":
            floor = max(self.members.values())
        named = tuple(sorted(self.members))
        if floor <= self.checkpoint and named == self._saved_members:
            return []
        self.checkpoint = max(self.checkpoint, floor)
        self._saved_members = named
        return [SaveCheckpoint(self.checkpoint, tuple(sorted(self.members.items())))]

    def checkpoint_saved(self, checkpoint: int, now: int) -> list[object]:
        """The driver's SaveCheckpoint up to `checkpoint` is durable: publish and count it."""
        self.now = now
        if checkpoint <= self.saved:
            return []
        self.saved = checkpoint
        out: list[object] = [PublishCheckpoint(link, checkpoint)
                             for link, other in self.links.items() if other.slave_id is not None]
        return out + self._complete_covered()

    # ---- pushing and time ---------------------------------------------------------
    def _push(self, link: int, ln: Link, now: int) -> Sequence[object]:
        if ln.push is None:
            return []
        out: list[Transfer] = []
        cfg = self.config
        limit = min(self.log_end, max(ln.acked, ln.base) + cfg.window)
        while ln.push < limit:
            seg_end = ln.push - ln.push % cfg.segment_size + cfg.segment_size
            size = min(cfg.transfer_batch, seg_end - ln.push, limit - ln.push)
            out.append(Transfer(link, ln.push, size))
            ln.push += size
            ln.sent_at = now
        return out

    def tick(self, now: int) -> list[object]:
        self.now = now
        cfg = self.config
        out: list[object] = []
        for link, ln in list(self.links.items()):
            if now - ln.heard_at >= cfg.housekeeping_ms:
                del self.links[link]
                out.append(Close(link, f"no report from the slave for {cfg.housekeeping_ms} ms"))
            elif ln.push is not None and now - ln.sent_at >= cfg.heartbeat_ms:
                ln.sent_at = now
                out.append(Heartbeat(link, ln.push))
                if cfg.checkpoint and ln.slave_id is not None:
                    out.append(PublishCheckpoint(link, self.saved))
            elif self.recovering and ln.reported >= 0 and now - ln.sent_at >= cfg.heartbeat_ms:
                # a recovering master pushes nothing yet: without a heartbeat at the offset
                # the slave reported (its next byte), its link would close on housekeeping,
                # the refilling slave's too, and the refill would never finish (#34)
                ln.sent_at = now
                out.append(Heartbeat(link, ln.reported))
        if self.recovering:
            assert self.recovery is not None
            out += self._refill_stalled(now)
            done = self.recovery.tick(now, self.log_end)
            if done:
                out += done + self._recovered(now)
        if cfg.checkpoint and self.membership.expire(now):  # (only under an injected bug)
            out += self._recompute()
        while self.waiters and self.waiters[0][1] <= now:
            out.append(Complete(self.waiters.popleft()[2], SyncStatus.TIMEOUT))
        return out

    def status(self) -> dict[str, Any]:
        return {"logEnd": self.log_end, "checkpoint": self.checkpoint, "saved": self.saved,
                "members": {str(k): v for k, v in self.members.items()},
                "leaving": {str(k): why for k, why in self.membership.leaving.items()},
                "slaves": [{"link": k, "acked": ln.acked, "push": ln.push,
                            "slaveId": ln.slave_id} for k, ln in self.links.items()],
                "waiting": len(self.waiters), "recovering": self.recovering}
