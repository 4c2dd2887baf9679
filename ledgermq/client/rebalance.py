"""Which queues a push consumer serves: the group's queues shared out by rebalancing,
each assigned queue's state, and (orderly consumption) the broker-side queue locks.

Every client of a CLUSTERING group sorts the same queues and the same client ids and takes
its own slice (allocate_averagely): once they see the same ids, the slices cover every
queue once without the clients talking to each other. A BROADCASTING client takes every
queue. A queue leaving a client's slice has its progress committed as it is dropped, so
its next owner resumes about where this one stopped.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, cast

from ..remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..remoting.codes import RETRY_PREFIX
from .instance import ClientInstance, MQClientError
from .message import MessageExt, MessageQueue

if TYPE_CHECKING:
    from .offsets import LocalOffsetStore, RemoteOffsetStore
    from .pull import MessageSelector

log = logging.getLogger(__name__)



class AssignedQueue:
    """A queue assigned to this consumer: where to pull next, what is in flight."""

    def __init__(self, mq: MessageQueue, offset: int):
        self.mq = mq
        self.next_offset = offset
        self.in_flight: dict[int, MessageExt] = {}
        self.consumed_to = offset  # everything below is done
        self.committed = -1
        self.dropped = False
        self.task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()  # orderly: one batch at a time

    def progress(self) -> int:
        """The offset to commit: every message below it is consumed."""
        return min(self.in_flight) if self.in_flight else self.consumed_to


class QueueRebalance:
    """Mixed into PushConsumer."""

    queues: dict[MessageQueue, AssignedQueue]
    # set by PushConsumer (and ConsumerBase)
    instance: ClientInstance
    group: str
    running: bool
    orderly: bool
    consume_from: str
    consume_timestamp_ms: int
    subscriptions: dict[str, MessageSelector]
    offset_store: RemoteOffsetStore | LocalOffsetStore
    _rebalance_lock: asyncio.Lock | None  # made in start()

    if TYPE_CHECKING:  # PushConsumer's and ConsumerBase's
        @property
        def clustering(self) -> bool: ...
        async def _pull_loop(self, state: AssignedQueue) -> None: ...
        async def _commit_state(self, state: AssignedQueue) -> None: ...
        async def _broker_for(self, mq: MessageQueue) -> str: ...
        async def min_offset(self, mq: MessageQueue) -> int: ...
        async def max_offset(self, mq: MessageQueue) -> int: ...
        async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...

    # ---- assignment -----------------------------------------------------------------
    async def _consumer_ids(self, topic: str) -> list[str]:
        route = await self.instance.route(topic)
        for addrs in (route.brokers().values() if route else []):
            addr = addrs.get(0) or next(iter(addrs.values()), None)
            if addr is None:
                continue
            try:
                resp = await self.instance.broker_request(addr, RemotingCommand(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext={"consumerGroup": self.group}))
            except RemotingError:
                continue
            if resp.code == ResponseCode.SUCCESS:
                return sorted(json.loads(cast(bytes, resp.body)).get("consumerIdList", []))
        return []

    async def rebalance(self) -> None:
        """Share the subscribed queues with the group: each client takes a contiguous,
        near-equal slice of the sorted queues (RocketMQ's average allocation)."""
        if not self.running:
            return
        assert self._rebalance_lock is not None  # running: start() made it
        async with self._rebalance_lock:
            wanted: set[MessageQueue] = set()
            for topic in self.subscriptions:
                route = await self.instance.route(topic)
                if route is None:
                    continue
                mqs = sorted(route.read_queues())
                if self.clustering:
                    cids = await self._consumer_ids(topic)
                    mqs = allocate_averagely(mqs, cids, self.instance.client_id)
                wanted.update(mqs)
            for mq in [q for q in self.queues if q not in wanted]:
                await self._drop(self.queues[mq])
            for mq in sorted(wanted - set(self.queues)):
                try:
                    offset = await self._start_offset(mq)
                except (RemotingError, MQClientError) as e:
                    log.warning("cannot find where to start %s: %s", mq, e)
                    continue
                state = AssignedQueue(mq, offset)
                self.queues[mq] = state
                state.task = asyncio.create_task(self._pull_loop(state))

    async def _drop(self, state: AssignedQueue) -> None:
        state.dropped = True
        if state.task:
            state.task.cancel()
        self.queues.pop(state.mq, None)
        await self._commit_state(state)
        if self.orderly:
            await self._lock_request(RequestCode.UNLOCK_BATCH_MQ, [state.mq])

    async def _start_offset(self, mq: MessageQueue) -> int:
        committed = await self.offset_store.read(mq)
        if committed is not None:
            return committed
        if mq.topic.startswith(RETRY_PREFIX) or self.consume_from == "CONSUME_FROM_FIRST_OFFSET":
            return await self.min_offset(mq)
        if self.consume_from == "CONSUME_FROM_TIMESTAMP":
            return await self.search_offset(mq, self.consume_timestamp_ms)
        return await self.max_offset(mq)

    # ---- orderly locks --------------------------------------------------------------
    async def _lock_request(self, code: int, mqs: list[MessageQueue]) -> bool:
        ok = True
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, qs in by_broker.items():
            body = json.dumps({"consumerGroup": self.group, "clientId": self.instance.client_id,
                               "mqSet": [q.to_json() for q in qs]}).encode()
            try:
                addr = await self._broker_for(qs[0])
                resp = await self.instance.broker_request(addr, RemotingCommand(code, body=body))
                if code == RequestCode.LOCK_BATCH_MQ:
                    got = json.loads(cast(bytes, resp.body) or b"{}").get("lockOKMQSet", [])
                    ok &= len(got) == len(qs)
            except RemotingError:
                ok = False
        return ok

    async def _lock_all(self) -> None:
        await self._lock_request(RequestCode.LOCK_BATCH_MQ, list(self.queues))


def allocate_averagely(mqs: list[MessageQueue], cids: list[str], me: str) -> list[MessageQueue]:
    """RocketMQ's AllocateMessageQueueAveragely: contiguous near-equal slices."""
    if me not in cids or not mqs:
        return []
    index = cids.index(me)
    n, k = len(mqs), len(cids)
    mod = n % k
    size = (1 if n <= k else (n // k + 1 if index < mod else n // k))
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [mqs[(start + i) % n] for i in range(min(size, n - start))] if start < n else []
