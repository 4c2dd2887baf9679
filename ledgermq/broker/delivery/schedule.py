"""Delayed delivery: messages with a delay level wait in SCHEDULE_TOPIC_XXXX (queue
level-1) and move to their real topic once store time + the level's delay has passed.

Each level's queue is FIFO in delivery time (one delay per queue), so only its head needs
looking at. Progress per level is saved in config/delayOffset.json.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ...runtime.clock import wall_ms
from ...runtime.files import read_json, write_json_atomically
from ...store import MessageStore
from ...wire.message import (
    MessageFormatError, StoredMessage, decode_message,
)
from ..access.system_topics import SCHEDULE_TOPIC
from .parked import BadParked, parked_destination
from .rounds import run_rounds

if TYPE_CHECKING:
    from ...store import PutResult
    from ...wire.batch import EncodedBatch

log = logging.getLogger(__name__)


class ScheduleService:
    def __init__(self, store: MessageStore, delays_ms: list[int], path: Path,
                 poll_interval_s: float = 0.1,
                 append: Callable[[EncodedBatch], PutResult] | None = None,
                 active: Callable[[], bool] | None = None):
        self.store = store
        # how a due message is written (the broker replicates it in DLedger mode) and
        # whether this broker delivers at all (only a writable one does)
        self.append = append or store.append
        self.active = active or (lambda: True)
        self.delays_ms = delays_ms
        self.path = path
        self.poll_interval_s = poll_interval_s
        self.offsets: dict[int, int] = {int(k): int(v) for k, v in
                                        read_json(path, {}).get("offsetTable", {}).items()}
        self._dirty = False

    def delay_of(self, level: int) -> int:
        return self.delays_ms[min(level, len(self.delays_ms)) - 1]

    async def run(self) -> None:
        await run_rounds("delayed delivery", self.poll_interval_s, self._round,
                         active=self.active)

    async def _round(self) -> bool:
        """Deliver what is due; once nothing is, save the levels' offsets. Whether more may
        be due at once."""
        if self.deliver_due(wall_ms()):
            return True
        if self._dirty:
            self._dirty = False  # (its fsync off the loop; the table copied here)
            try:
                await asyncio.get_running_loop().run_in_executor(
                    None, write_json_atomically, self.path, self._doc())
            except OSError as e:  # (a full disk): saved with a later round
                self._dirty = True
                log.warning("delay offsets not saved: %s", e)
        return False

    def deliver_due(self, now_ms: int, limit: int = 1000) -> int:
        """Move every due message (at most `limit`) to its real topic; returns how many."""
        moved = 0
        for level in range(1, len(self.delays_ms) + 1):
            qid = level - 1
            offset = max(self.offsets.get(level, 0),
                         self.store.min_offset_in_queue(SCHEDULE_TOPIC, qid))
            while moved < limit and offset < self.store.max_offset_in_queue(SCHEDULE_TOPIC, qid):
                got = self.store.get_messages(SCHEDULE_TOPIC, qid, offset, max_count=1)
                if not got.message_count:
                    offset = got.next_begin_offset
                    continue
                try:
                    msg = decode_message(got.messages()[0])
                except MessageFormatError as e:  # (damaged): skipped, never blocks the level
                    log.error("schedule message at level %d offset %d unreadable (%s): "
                              "dropped", level, offset, e)
                    offset += 1
                    continue
                if msg.store_timestamp + self.delay_of(level) > now_ms:
                    break
                if not self._deliver(msg):
                    break  # the store refused (disk full...): try again next round
                offset += 1
                moved += 1
            if offset != self.offsets.get(level, 0):
                self.offsets[level] = offset
                self._dirty = True
        return moved

    def _deliver(self, msg: StoredMessage) -> bool:
        props = dict(msg.properties)
        try:
            topic, qid = parked_destination(props)
        except BadParked as e:
            log.error("schedule message at %d: %s; dropped", msg.phys_offset, e)
            return True
        # (DELAY stays, as RocketMQ 5 delivers it: appended here, not sent, it is not
        # scheduled again)
        try:
            batch = self.store.encode_again(msg, topic, qid, props)
        except MessageFormatError as e:
            log.error("schedule message at %d cannot be delivered (%s); dropped",
                      msg.phys_offset, e)
            return True
        result = self.append(batch)
        if not result.ok:
            log.warning("delayed delivery to %s refused: %s", topic, result.error)
        return result.ok

    def save(self) -> None:
        self._dirty = False
        write_json_atomically(self.path, self._doc())

    def _doc(self) -> dict[str, dict[str, int]]:
        return {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}
