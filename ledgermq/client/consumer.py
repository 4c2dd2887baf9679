"""Consumers: PullConsumer (you choose queues and offsets) and PushConsumer (a group that
shares queues by rebalancing, pulls with long polling, calls your listener, retries failed
messages through the broker and commits offsets)."""
from __future__ import annotations

import asyncio
import enum
import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from ..remoting import Connection, RemotingCommand, RemotingError, RequestCode, ResponseCode
from .instance import ClientInstance, MQClientError, periodic
from .message import MessageExt, MessageQueue, decode_pulled

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND, PULL_FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    raw: bytes | None = None  # pull(raw=True): the stored messages, undecoded


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


def _tags_of(expression: str) -> set[str] | None:
    if not expression or expression.strip() == "*":
        return None
    return {t.strip() for t in expression.split("||") if t.strip()}


class _Base:
    def __init__(self, group: str, namesrv: str, instance: ClientInstance | None,
                 on_request=None):
        self.group = group
        self.instance = instance or ClientInstance(namesrv, on_request=on_request)

    async def _broker_for(self, mq: MessageQueue) -> str:
        """The queue's master, or a slave while the master is down (reads only)."""
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            await self.instance.route(mq.topic, refresh=True)
            addr = self.instance.read_addr(mq.broker_name)
        if addr is None:
            raise RemotingError(f"no address for broker {mq.broker_name}")
        return addr

    async def _queue_request(self, mq: MessageQueue, code: int, ext: dict,
                             timeout: float | None = None) -> RemotingCommand:
        addr = await self._broker_for(mq)
        return await self.instance.broker_request(addr, RemotingCommand(code, ext=ext), timeout)

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return route.read_queues()

    async def _offset_call(self, mq: MessageQueue, code: int, **extra) -> int:
        resp = await self._queue_request(mq, code, {"topic": mq.topic,
                                                    "queueId": str(mq.queue_id), **extra})
        if resp.code != ResponseCode.SUCCESS:
            raise MQClientError(resp.code, resp.remark)
        return int(resp.ext["offset"])

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(mq, RequestCode.GET_MAX_OFFSET)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(mq, RequestCode.GET_MIN_OFFSET)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._offset_call(mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                       timestamp=str(timestamp_ms))

    async def query_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of `mq` on the broker, or None if it has none."""
        resp = await self._queue_request(mq, RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id)})
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise MQClientError(resp.code, resp.remark)
        return int(resp.ext["offset"])

    async def commit(self, mq: MessageQueue, offset: int) -> None:
        resp = await self._queue_request(mq, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id),
            "commitOffset": str(offset)})
        if resp.code != ResponseCode.SUCCESS:
            raise MQClientError(resp.code, resp.remark)

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32,
                   expression: str = "*", *, suspend_ms: int = 0, commit_offset: int = -1,
                   timeout: float | None = None, raw: bool = False) -> PullResult:
        """Messages of `mq` from `offset`; with `raw`, the stored bytes as the broker sent
        them (PullResult.raw, back to back) instead of decoded messages."""
        flags = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms else 0) | \
            (PULL_FLAG_COMMIT_OFFSET if commit_offset >= 0 else 0)
        ext = {"consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id),
               "queueOffset": str(offset), "maxMsgNums": str(max_nums), "sysFlag": str(flags),
               "commitOffset": str(commit_offset), "suspendTimeoutMillis": str(suspend_ms),
               "subscription": expression or "*", "subVersion": str(int(time.time() * 1000)),
               "expressionType": "TAG"}
        resp = await self._queue_request(mq, RequestCode.PULL_MESSAGE, ext,
                                         timeout or (suspend_ms / 1000 + 5))
        nxt = int(resp.ext.get("nextBeginOffset", offset))
        lo, hi = int(resp.ext.get("minOffset", 0)), int(resp.ext.get("maxOffset", 0))
        if resp.code == ResponseCode.SUCCESS:
            if raw and (expression or "*").strip() == "*":
                return PullResult(PullStatus.FOUND, nxt, lo, hi, raw=resp.body)
            msgs = decode_pulled(resp.body, mq)
            tags = _tags_of(expression)
            if tags is not None:
                msgs = [m for m in msgs if m.tags in tags]
            return PullResult(PullStatus.FOUND, nxt, lo, hi, msgs)
        status = {ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
                  ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
                  ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL}.get(resp.code)
        if status is None:
            raise MQClientError(resp.code, resp.remark)
        return PullResult(status, nxt, lo, hi)


class PullConsumer(_Base):
    """Pull messages from queues you choose, at offsets you choose."""

    def __init__(self, group: str = "DEFAULT_CONSUMER", namesrv: str = "127.0.0.1:9876", *,
                 instance: ClientInstance | None = None):
        super().__init__(group, namesrv, instance)

    async def start(self) -> "PullConsumer":
        return self

    async def shutdown(self) -> None:
        await self.instance.close()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.shutdown()


Listener = Callable[[list[MessageExt]], "ConsumeStatus | bool | None | Awaitable"]


class _QueueState:
    """A queue assigned to this consumer: where to pull next, what is in flight."""

    def __init__(self, mq: MessageQueue, offset: int):
        self.mq = mq
        self.next_offset = offset
        self.in_flight: dict[int, MessageExt] = {}
        self.consumed_to = offset  # everything below is done
        self.committed = -1
        self.dropped = False
        self.task: asyncio.Task | None = None
        self.lock = asyncio.Lock()  # orderly: one batch at a time

    def progress(self) -> int:
        return min(self.in_flight) if self.in_flight else self.consumed_to


class PushConsumer(_Base):
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *,
                 message_model: str = "CLUSTERING", orderly: bool = False,
                 consume_from: str = "CONSUME_FROM_LAST_OFFSET",
                 consume_timestamp_ms: int | None = None, pull_batch_size: int = 32,
                 consume_batch_size: int = 1, max_reconsume_times: int = 16,
                 concurrency: int = 16, rebalance_interval: float = 20.0,
                 pull_suspend_ms: int = 15_000, offset_dir: str | Path | None = None,
                 instance: ClientInstance | None = None):
        if message_model not in ("CLUSTERING", "BROADCASTING"):
            raise ValueError("message_model must be CLUSTERING or BROADCASTING")
        if consume_from not in ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                                "CONSUME_FROM_TIMESTAMP"):
            raise ValueError(f"unknown consume_from {consume_from}")
        super().__init__(group, namesrv, instance, on_request=self._on_broker_request)
        self.message_model = message_model
        self.orderly = orderly
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms or int(time.time() * 1000) - 30 * 60_000
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = consume_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.rebalance_interval = rebalance_interval
        self.pull_suspend_ms = pull_suspend_ms
        self.subscriptions: dict[str, str] = {}
        self.listener: Listener | None = None
        self.queues: dict[MessageQueue, _QueueState] = {}
        self._sem: asyncio.Semaphore | None = None  # made in start(), on the running loop
        self._concurrency = concurrency
        self._tasks: list[asyncio.Task] = []
        self._rebalance_lock: asyncio.Lock | None = None
        self._offset_file = Path(offset_dir or Path.home() / ".ledgermq" / "offsets") / \
            f"{group}.json"
        self._local_offsets: dict[str, int] = {}
        self.running = False

    @property
    def clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self.subscriptions[topic] = expression or "*"

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self) -> "PushConsumer":
        if self.listener is None or not self.subscriptions:
            raise ValueError("subscribe to a topic and register a listener before start()")
        self._sem = asyncio.Semaphore(self._concurrency)
        self._rebalance_lock = asyncio.Lock()
        if self.clustering:
            self.subscriptions.setdefault(RETRY_PREFIX + self.group, "*")
        elif self._offset_file.exists():
            self._local_offsets = json.loads(self._offset_file.read_text())
        self.running = True
        for topic in self.subscriptions:
            await self.instance.route(topic, refresh=True)
        await self._heartbeat()
        await self.rebalance()
        self._tasks = [
            asyncio.create_task(periodic(30, self._heartbeat, "consumer heartbeat")),
            asyncio.create_task(periodic(self.rebalance_interval, self._refresh_and_rebalance,
                                         "rebalance")),
            asyncio.create_task(periodic(5, self.persist_offsets, "offset commit"))]
        if self.orderly:
            self._tasks.append(asyncio.create_task(periodic(20, self._lock_all, "queue lock")))
        return self

    async def shutdown(self) -> None:
        self.running = False
        for t in self._tasks:
            t.cancel()
        for state in list(self.queues.values()):
            await self._drop(state)
        await self.persist_offsets()
        if self.clustering:
            for addr in self.instance.broker_addrs():
                try:
                    await self.instance.broker_request(addr, RemotingCommand(
                        RequestCode.UNREGISTER_CLIENT, ext={
                            "clientID": self.instance.client_id, "consumerGroup": self.group}), 1.0)
                except RemotingError:
                    pass
        await self.instance.close()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.shutdown()

    def _on_broker_request(self, cmd: RemotingCommand, conn: Connection):
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and self.running:
            asyncio.get_running_loop().create_task(self.rebalance())
            return None
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"consumer does not serve code {cmd.code}")

    async def _heartbeat(self) -> None:
        subs = [{"topic": t, "subString": e, "tagsSet": sorted(_tags_of(e) or []),
                 "codeSet": [], "subVersion": int(time.time() * 1000), "expressionType": "TAG",
                 "classFilterMode": False} for t, e in self.subscriptions.items()]
        self._heard = await self.instance.heartbeat([], [{
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY", "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from, "subscriptionDataSet": subs,
            "unitMode": False}])

    _heard = False

    async def _refresh_and_rebalance(self) -> None:
        for topic in self.subscriptions:
            await self.instance.route(topic, refresh=True)
        if not self._heard:  # a broker missed our heartbeat: the group would not count us
            await self._heartbeat()
        await self.rebalance()

    # ---- rebalance ------------------------------------------------------------------
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
                return sorted(json.loads(resp.body).get("consumerIdList", []))
        return []

    async def rebalance(self) -> None:
        """Share the subscribed queues with the group: each client takes a contiguous,
        near-equal slice of the sorted queues (RocketMQ's average allocation)."""
        if not self.running:
            return
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
                state = _QueueState(mq, offset)
                self.queues[mq] = state
                state.task = asyncio.create_task(self._pull_loop(state))

    async def _drop(self, state: _QueueState) -> None:
        state.dropped = True
        if state.task:
            state.task.cancel()
        self.queues.pop(state.mq, None)
        await self._commit_state(state)
        if self.orderly:
            await self._lock_request(RequestCode.UNLOCK_BATCH_MQ, [state.mq])

    async def _start_offset(self, mq: MessageQueue) -> int:
        if not self.clustering:
            key = f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"
            if key in self._local_offsets:
                return self._local_offsets[key]
        else:
            committed = await self.query_offset(mq)
            if committed is not None and committed >= 0:
                return committed
        if mq.topic.startswith(RETRY_PREFIX) or self.consume_from == "CONSUME_FROM_FIRST_OFFSET":
            return await self.min_offset(mq)
        if self.consume_from == "CONSUME_FROM_TIMESTAMP":
            return await self.search_offset(mq, self.consume_timestamp_ms)
        return await self.max_offset(mq)

    # ---- pulling and consuming -----------------------------------------------------
    async def _pull_loop(self, state: _QueueState) -> None:
        mq = state.mq
        expression = self.subscriptions.get(mq.topic, "*")
        while self.orderly and not state.dropped and \
                not await self._lock_request(RequestCode.LOCK_BATCH_MQ, [mq]):
            await asyncio.sleep(1)  # another consumer still holds the queue
        while self.running and not state.dropped:
            if len(state.in_flight) > 1000:  # flow control: let the listener catch up
                await asyncio.sleep(0.05)
                continue
            try:
                result = await self.pull(mq, state.next_offset, self.pull_batch_size, expression,
                                         suspend_ms=self.pull_suspend_ms,
                                         commit_offset=state.committed if self.clustering else -1)
            except asyncio.CancelledError:
                raise
            except (RemotingError, MQClientError) as e:
                log.debug("pull %s failed: %s", mq, e)
                await asyncio.sleep(1)
                continue
            if state.dropped:
                return
            if result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning("offset %d of %s is out of range; moving to %d", state.next_offset,
                            mq, result.next_begin_offset)
                state.next_offset = state.consumed_to = result.next_begin_offset
                await self._commit_state(state)
                continue
            if result.status is PullStatus.FOUND and not result.messages:
                state.next_offset = result.next_begin_offset
                if not state.in_flight:
                    state.consumed_to = state.next_offset
                continue
            if result.status is not PullStatus.FOUND:
                state.next_offset = result.next_begin_offset
                if not state.in_flight:
                    state.consumed_to = state.next_offset
                continue
            for m in result.messages:
                state.in_flight[m.queue_offset] = m
            state.next_offset = result.next_begin_offset
            if self.orderly:
                await self._consume_orderly(state, result.messages)
            else:
                for i in range(0, len(result.messages), self.consume_batch_size):
                    batch = result.messages[i:i + self.consume_batch_size]
                    await self._sem.acquire()
                    asyncio.create_task(self._consume_concurrently(state, batch))

    async def _call_listener(self, msgs: list[MessageExt]) -> bool:
        try:
            if inspect.iscoroutinefunction(self.listener):
                outcome = await self.listener(msgs)
            else:
                outcome = await asyncio.get_running_loop().run_in_executor(None, self.listener, msgs)
        except Exception:
            log.exception("listener raised; the messages will be retried")
            return False
        return outcome is None or outcome is True or outcome is ConsumeStatus.CONSUME_SUCCESS

    async def _consume_concurrently(self, state: _QueueState, msgs: list[MessageExt]) -> None:
        try:
            ok = await self._call_listener(msgs)
            if not ok and self.clustering:
                failed = [m for m in msgs if not await self._send_back(m, 0)]
                while failed and not state.dropped:  # broker unreachable: retry here
                    await asyncio.sleep(1)
                    if await self._call_listener(failed):
                        break
                    failed = [m for m in failed if not await self._send_back(m, 0)]
            self._done(state, msgs)
        finally:
            self._sem.release()

    async def _consume_orderly(self, state: _QueueState, msgs: list[MessageExt]) -> None:
        async with state.lock:
            for i in range(0, len(msgs), self.consume_batch_size):
                batch = msgs[i:i + self.consume_batch_size]
                attempts = 0
                while not state.dropped:
                    if await self._call_listener(batch):
                        break
                    attempts += 1
                    if attempts > self.max_reconsume_times and self.clustering:
                        for m in batch:  # give up: dead-letter it and move on
                            await self._send_back(m, -1)
                        break
                    await asyncio.sleep(min(1.0, 0.1 * attempts))
                self._done(state, batch)

    def _done(self, state: _QueueState, msgs: list[MessageExt]) -> None:
        for m in msgs:
            state.in_flight.pop(m.queue_offset, None)
        if not state.in_flight:
            state.consumed_to = max(state.consumed_to, state.next_offset)

    async def _send_back(self, msg: MessageExt, delay_level: int) -> bool:
        try:
            addr = await self._broker_for(msg.queue)
            resp = await self.instance.broker_request(addr, RemotingCommand(
                RequestCode.CONSUMER_SEND_MSG_BACK, ext={
                    "offset": str(msg.commit_log_offset), "group": self.group,
                    "delayLevel": str(delay_level), "originMsgId": msg.msg_id,
                    "originTopic": msg.topic, "unitMode": "false",
                    "maxReconsumeTimes": str(self.max_reconsume_times)}))
            return resp.code == ResponseCode.SUCCESS
        except RemotingError:
            return False

    # ---- offsets --------------------------------------------------------------------
    async def _commit_state(self, state: _QueueState) -> None:
        offset = state.progress()
        if offset == state.committed:
            return
        if self.clustering:
            try:
                await self.commit(state.mq, offset)
            except (RemotingError, MQClientError) as e:
                log.debug("commit of %s failed: %s", state.mq, e)
                return
        else:
            mq = state.mq
            self._local_offsets[f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"] = offset
        state.committed = offset

    async def persist_offsets(self) -> None:
        for state in list(self.queues.values()):
            await self._commit_state(state)
        if not self.clustering and self._local_offsets:
            self._offset_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._offset_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._local_offsets))
            tmp.replace(self._offset_file)

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
                    got = json.loads(resp.body or b"{}").get("lockOKMQSet", [])
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
