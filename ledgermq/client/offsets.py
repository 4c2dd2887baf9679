"""Where a push consumer keeps its progress (RocketMQ's OffsetStore).

CLUSTERING: the group shares its queues, so their offsets live on the brokers
(RemoteOffsetStore). BROADCASTING: every client consumes every queue, so each keeps its
own offsets, in a JSON file (LocalOffsetStore). An offset is the first message not yet
consumed: a restart resumes there, and at worst consumes a message again.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ..remoting import RemotingError
from .instance import MQClientError
from .message import MessageQueue
from .pull import ConsumerBase

log = logging.getLogger(__name__)


class RemoteOffsetStore:
    """The group's offsets, committed to and read from the queue's broker."""

    def __init__(self, consumer: ConsumerBase):
        self.consumer = consumer

    def load(self) -> None:
        pass  # read per queue, when it is assigned

    async def read(self, mq: MessageQueue) -> int | None:
        """The committed offset, or None if the group has none for `mq` (raises when the
        broker cannot be asked)."""
        committed = await self.consumer.query_offset(mq)
        return committed if committed is not None and committed >= 0 else None

    async def update(self, mq: MessageQueue, offset: int) -> bool:
        """Commit `offset`; False if the broker did not take it (the next round retries)."""
        try:
            await self.consumer.commit(mq, offset)
        except (RemotingError, MQClientError) as e:
            log.debug("commit of %s failed: %s", mq, e)
            return False
        return True

    def persist(self) -> None:
        pass  # every update went to the broker already


class LocalOffsetStore:
    """This client's own offsets, kept in memory and written to `path` by persist()."""

    def __init__(self, path: Path):
        self.path = path
        self.offsets: dict[str, int] = {}  # "topic@broker@queue id" -> offset

    @staticmethod
    def _key(mq: MessageQueue) -> str:
        return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"

    def load(self) -> None:
        if self.path.exists():
            self.offsets = json.loads(self.path.read_text())

    async def read(self, mq: MessageQueue) -> int | None:
        return self.offsets.get(self._key(mq))

    async def update(self, mq: MessageQueue, offset: int) -> bool:
        self.offsets[self._key(mq)] = offset
        return True

    def persist(self) -> None:
        """Write the offsets atomically (a temporary file renamed over the old one)."""
        if not self.offsets:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.offsets))
        tmp.replace(self.path)
