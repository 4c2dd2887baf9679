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
from ..remoting import RemotingError

EARLIEST, LATEST = -2, -1
PREFETCH = 2  # pulled bodies waiting while the current one is converted


def queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


class QueuesUnavailable(RuntimeError):
    """Queues of a topic that cannot be read now: their broker group is down (the route
    no longer lists them) or does not answer."""

    def __init__(self, topic: str, why: dict[str, str]):
        self.topic, self.queues = topic, sorted(why)
        groups = sorted({k.rpartition(":")[0] for k in why})
        reasons = "; ".join(sorted({f"{k.rpartition(':')[0]}: {r}" for k, r in why.items()}))
        super().__init__(
            f"topic {topic}: queue(s) {', '.join(self.queues)} unavailable (group(s) "
            f"{', '.join(groups)} down or not answering: {reasons}); the batch fails rather "
            "than skip them. With failOnUnavailable=false a stream reads the other queues "
            "and waits for these, reading them from where it stopped once they are back")


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

    def bounds(self, mqs: list[MessageQueue]) -> tuple[dict[str, tuple[int, int]],
                                                        dict[str, str]]:
        """(min, max) of each queue that answered, and why each other one did not."""
        async def one(mq):
            return await self.consumer.min_offset(mq), await self.consumer.max_offset(mq)

        async def all_():
            return await asyncio.gather(*(one(mq) for mq in mqs), return_exceptions=True)
        got, failed = {}, {}
        for mq, b in zip(mqs, self.run(all_())):
            if isinstance(b, (RemotingError, MQClientError)):
                failed[queue_key(mq)] = str(b)
            elif isinstance(b, BaseException):
                raise b
            else:
                got[queue_key(mq)] = b
        return got, failed

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
            try:
                r = loop.run_until_complete(consumer.pull(mq, off, min(batch, end - off),
                                                          raw=True))
            except (RemotingError, MQClientError) as e:  # the group went down meanwhile
                raise QueuesUnavailable(mq.topic, {queue_key(mq): f"pull at offset {off} "
                                                   f"of [{start}, {end}): {e}"}) from None
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
