"""A master whose disk is full hands its group to a follower (DLedger, controller and
checkpoint mode).

A full disk refuses every write until space returns. RocketMQ's broker does the same,
and its group takes no write meanwhile. A follower's disk is its own, and the follower
holds every acknowledged message (a Raft peer, a SyncStateSet member, a checkpoint
member), so it can take the writes at once. A master whose store has refused writes for
a full disk for FULL_FOR_S hands over to its most caught-up follower. It goes the way a
hand-over on clients' reports goes (client_handover.py: a leadership transfer, an
election by the controller, a failover by the control node), at most once in
HAND_OVER_EVERY_S. A disk that retention frees within FULL_FOR_S keeps its master.
`handOverOnFullDisk=false` turns it off."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable

from .client_handover import HAND_OVER_EVERY_S, GroupRole
from .protocol import Metric

if TYPE_CHECKING:
    from .base import ModeHost

log = logging.getLogger(__name__)

CHECK_EVERY_S = 0.5
FULL_FOR_S = 1.0  # how long writes are refused for a full disk before the master moves


class FullDiskHandOver:
    def __init__(self, host: ModeHost, mode: str, role: Callable[[], GroupRole | None],
                 hand_to: Callable[[str], str | None],
                 offsets: Callable[[], dict[str, int]]):
        """`role` and `hand_to` as for ClientHandOver; `offsets`: how far each follower
        has the log (the mode's replica_offsets), to pick the one that catches up first."""
        self.store, self.config, self.mode = host.store, host.config, mode
        self._role, self._hand_to, self._offsets = role, hand_to, offsets
        self._full_since: float | None = None
        self._handed_over_at = float("-inf")
        self._refused: str | None = None  # the mode's last "no", logged once
        self._task: asyncio.Task[None] | None = None
        self.hand_overs = 0

    def metrics(self) -> list[Metric]:
        return [(f"ledgermq_{self.mode}_full_disk_hand_overs_total", "Times this master "
                 "handed its group to a follower because its own disk was full.", {},
                 self.hand_overs)]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY_S)
            try:
                self.check(time.monotonic())
            except Exception:
                log.exception("%s: the full-disk check failed", self.mode)

    def check(self, now: float) -> str | None:
        """Hand over if the disk has been full long enough; the follower handed to."""
        if not self.store.disk_full:
            self._full_since = self._refused = None
            return None
        if self._full_since is None:
            self._full_since = now
        d = self._role()
        if (now - self._full_since < FULL_FOR_S or d is None or not d.is_master
                or not d.successors or not self.config.handOverOnFullDisk
                or now - self._handed_over_at < HAND_OVER_EVERY_S):
            return None
        offsets = self._offsets()
        follower = max(sorted(d.successors), key=lambda f: offsets.get(f, -1))
        why = self._hand_to(follower)
        if why is not None:
            if why != self._refused:
                log.warning("%s %s: the disk is full, and the group stays here: %s",
                            self.mode, self.config.brokerName, why)
            self._refused = why
            return None
        self._handed_over_at = now
        self.hand_overs += 1
        log.error("%s %s: writes refused for a full disk for %.1f s (%s): handing the "
                  "group to %s", self.mode, self.config.brokerName, now - self._full_since,
                  self.store.disk_full_reason or "above diskMaxUsedSpaceRatio", follower)
        return follower

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
