"""The driver's view of the topics: which queues exist and their offsets, and the
worker's pull of one queue's offset range. Both run the asyncio client on a private
event loop (Spark calls us from plain threads)."""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Iterator

from ..client import MQClientError, PullConsumer, PullStatus
from ..client.message import MessageQueue

EARLIEST, LATEST = -2, -1
PREFETCH = 2  # pulled bodies waiting while the current one is converted


def queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


def parse_key(topic: str, key: str) -> MessageQueue:
    broker, _, qid = key.rpartition(":")
    if not broker or not qid.isdigit():
        raise ValueError(f"queue {key!r} is not broker:queueId")
    return MessageQueue(topic, broker, int(qid))


class Topics:
    """Queue listing and offset lookups for the driver (one client, reused)."""

    def __init__(self, namesrv: str, group: str = "ledgermq-spark"):
        self.loop = asyncio.new_event_loop()
        self.consumer = PullConsumer(group, namesrv)

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def queues(self, topic: str) -> list[MessageQueue]:
        try:
            return self.run(self.consumer.fetch_queues(topic))
        except MQClientError as e:
            raise ValueError(f"topic {topic!r}: {e}") from None

    def bounds(self, mqs: list[MessageQueue]) -> dict[str, tuple[int, int]]:
        async def one(mq):
            return await self.consumer.min_offset(mq), await self.consumer.max_offset(mq)

        async def all_():
            return await asyncio.gather(*(one(mq) for mq in mqs))
        return {queue_key(mq): b for mq, b in zip(mqs, self.run(all_()))}

    def offset_at(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self.run(self.consumer.search_offset(mq, timestamp_ms))

    def commit(self, group: str, offsets: dict[str, dict[str, int]]) -> None:
        """Record a consumer group's progress on the brokers (for consumerProgress)."""
        c = PullConsumer(group, "", instance=self.consumer.instance)

        async def all_():
            for topic, qs in offsets.items():
                for key, off in qs.items():
                    await c.commit(parse_key(topic, key), off)
        self.run(all_())

    def close(self) -> None:
        self.run(self.consumer.shutdown())
        self.loop.close()


def pull_range(namesrv: str, mq: MessageQueue, start: int, end: int,
               batch: int) -> Iterator[bytes]:
    """Pulled bodies (stored messages back to back, undecoded) covering the offsets
    [start, end) of queue `mq`, in order; the last may run past `end`. The next pull runs
    in a thread while the caller converts the current one."""
    ahead: queue.Queue = queue.Queue(maxsize=PREFETCH)
    stop = threading.Event()
    done = object()

    def offer(item) -> bool:
        """Queue `item` unless the reader has gone; False if it has."""
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def fetch() -> None:
        try:
            for raw in _pull_sequential(namesrv, mq, start, end, batch):
                if not offer(raw):
                    return
            offer(done)
        except BaseException as e:  # handed to the reading side
            offer(e)

    t = threading.Thread(target=fetch, name=f"pull {mq.topic}:{queue_key(mq)}", daemon=True)
    t.start()
    try:
        while True:
            item = ahead.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join(timeout=10)


def _pull_sequential(namesrv: str, mq: MessageQueue, start: int, end: int,
                     batch: int) -> Iterator[bytes]:
    loop = asyncio.new_event_loop()
    consumer = PullConsumer("ledgermq-spark-reader", namesrv)
    try:
        off = start
        while off < end:
            r = loop.run_until_complete(consumer.pull(mq, off, min(batch, end - off),
                                                      raw=True))
            if r.status is PullStatus.FOUND:
                yield r.raw
                off = r.next_begin_offset
            elif r.status is PullStatus.OFFSET_ILLEGAL or r.min_offset > off:
                raise RuntimeError(
                    f"{mq.topic} {queue_key(mq)}: offsets [{off}, {r.min_offset}) are gone "
                    f"(retention removed them) — the data cannot be read exactly once")
            else:
                raise RuntimeError(f"{mq.topic} {queue_key(mq)}: offset {off} below the "
                                   f"planned end {end} is not readable ({r.status.value})")
    finally:
        loop.run_until_complete(consumer.shutdown())
        loop.close()
