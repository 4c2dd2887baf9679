"""PushConsumer: a consumer group's member that calls your listener.

Each assigned queue has one pull loop (long polling, flow-controlled at 1000 messages in
flight). Concurrently, batches go to the listener in parallel (at most `concurrency` at a
time) and a failed batch is sent back to the broker, which redelivers it through the
group's retry topic; orderly, a queue's batches go one at a time under the queue's broker
lock and a failed batch is retried here. A queue's committed offset never passes a message
still in flight.
"""
from __future__ import annotations

import asyncio
import enum
import inspect
import json
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable, cast

from ..remoting import Connection, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..remoting.codes import RETRY_PREFIX
from ..runtime.clock import wall_ms
from .instance import ClientInstance, MQClientError, TlsOption, periodic
from .message import MessageExt, MessageQueue
from .offsets import LocalOffsetStore, RemoteOffsetStore
from .pull import ConsumerBase, MessageSelector, PullStatus, as_selector, subscription_tags
from .rebalance import AssignedQueue, QueueRebalance

log = logging.getLogger(__name__)

ROUTE_RECHECK_S = 1.0  # a failed pull asks the name server again at most this often


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[list[MessageExt]],
                    "ConsumeStatus | bool | None | Awaitable[ConsumeStatus | bool | None]"]


class PushConsumer(QueueRebalance, ConsumerBase):
    """A member of a consumer group: serves its share of the subscribed queues (see
    rebalance.py), pulls them with long polling, hands messages to the listener, sends
    failed ones back to the broker for retry, and commits offsets every few seconds."""

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *,
                 message_model: str = "CLUSTERING", orderly: bool = False,
                 consume_from: str = "CONSUME_FROM_LAST_OFFSET",
                 consume_timestamp_ms: int | None = None, pull_batch_size: int = 32,
                 consume_batch_size: int = 1, max_reconsume_times: int | None = None,
                 concurrency: int = 16, rebalance_interval: float = 20.0,
                 pull_suspend_ms: int = 15_000, offset_dir: str | Path | None = None,
                 instance: ClientInstance | None = None, tls: TlsOption = None) -> None:
        """`tls`: True, False, an SSLContext, or None (LEDGERMQ_TLS decides)."""
        if message_model not in ("CLUSTERING", "BROADCASTING"):
            raise ValueError("message_model must be CLUSTERING or BROADCASTING")
        if consume_from not in ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                                "CONSUME_FROM_TIMESTAMP"):
            raise ValueError(f"unknown consume_from {consume_from}")
        super().__init__(group, namesrv, instance, on_request=self._on_broker_request, tls=tls)
        self.message_model = message_model
        self.orderly = orderly
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms or wall_ms() - 30 * 60_000
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = consume_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.rebalance_interval = rebalance_interval
        self.pull_suspend_ms = pull_suspend_ms
        self.subscriptions: dict[str, MessageSelector] = {}
        self.listener: Listener | None = None
        self.queues: dict[MessageQueue, AssignedQueue] = {}
        self._sem: asyncio.Semaphore | None = None  # made in start(), on the running loop
        self._concurrency = concurrency
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_lock: asyncio.Lock | None = None
        self.offset_store = RemoteOffsetStore(self) if self.clustering else LocalOffsetStore(
            Path(offset_dir or Path.home() / ".ledgermq" / "offsets") / f"{group}.json")
        self.running = False

    @property
    def clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    def subscribe(self, topic: str, expression: "str | MessageSelector" = "*") -> None:
        """`expression`: tags ("a || b", "*") or MessageSelector.by_sql("a > 3")."""
        self.subscriptions[topic] = as_selector(expression)

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self) -> "PushConsumer":
        if self.listener is None or not self.subscriptions:
            raise ValueError("subscribe to a topic and register a listener before start()")
        self._sem = asyncio.Semaphore(self._concurrency)
        self._rebalance_lock = asyncio.Lock()
        if self.clustering:
            self.subscriptions.setdefault(RETRY_PREFIX + self.group, as_selector("*"))
        self.offset_store.load()
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

    async def __aenter__(self) -> "PushConsumer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _on_broker_request(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and self.running:
            # with brokerName: that broker became its group's master (ledgermq's field;
            # other clients just rebalance)
            work = self._follow_new_master() if cmd.ext.get("brokerName") else self.rebalance()
            asyncio.get_running_loop().create_task(work)
            return None
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and self.running:
            try:
                table = {MessageQueue(e["topic"], e["brokerName"], int(e["queueId"])):
                         int(e["offset"]) for e in json.loads(cast(bytes, cmd.body))["offsetTable"]}
            except (ValueError, KeyError, TypeError) as e:
                log.warning("offset reset from %s unreadable: %s", conn.peer, e)
                return None
            asyncio.get_running_loop().create_task(self.reset_offsets(table))
            return None
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"consumer does not serve code {cmd.code}")

    async def reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        """An operator moved the group's offsets (resetOffsetByTime, skipAccumulatedMessage):
        the queues this client reads start again from there; what was pulled and not yet
        consumed is not committed over the reset."""
        assert self._rebalance_lock is not None  # asked only while running
        async with self._rebalance_lock:
            for mq, offset in table.items():
                old = self.queues.get(mq)
                if old is None:
                    continue
                old.dropped = True
                if old.task:
                    old.task.cancel()
                state = AssignedQueue(mq, offset)
                self.queues[mq] = state
                state.task = asyncio.create_task(self._pull_loop(state))
                log.info("%s reset to offset %d", mq, offset)

    async def _heartbeat(self) -> None:
        subs = [{"topic": t, "subString": s.expression,
                 "tagsSet": sorted(subscription_tags(s.expression) or [])
                 if s.type == "TAG" else [], "codeSet": [],
                 "subVersion": wall_ms(), "expressionType": s.type,
                 "classFilterMode": False} for t, s in self.subscriptions.items()]
        told = self.instance.broker_addrs()
        self._heard = await self.instance.heartbeat([], [{
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY", "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from, "subscriptionDataSet": subs,
            "unitMode": False}])
        self._told = told

    _heard = False
    _told: set[str] = set()  # the brokers the last heartbeat went to

    async def _refresh_and_rebalance(self) -> None:
        for topic in self.subscriptions:
            await self.instance.route(topic, refresh=True)
        # a broker missed our heartbeat (the group would not count us), or is new in the
        # route (a slave that joined: as a new master it could not tell us to move)
        if not self._heard or not self.instance.broker_addrs() <= self._told:
            await self._heartbeat()
        await self.rebalance()

    async def _follow_new_master(self) -> None:
        try:
            await self.instance.follow_masters(self.subscriptions)
        except (RemotingError, MQClientError) as e:
            log.debug("routes after a master change: %s", e)
        await self.rebalance()

    async def _after_failed_pull(self, mq: MessageQueue, addr: str | None) -> None:
        """A pull of `mq` from `addr` failed: retry at once where the route, fetched again
        when older than ROUTE_RECHECK_S, names another broker to read it from now (a
        killed master's successor); otherwise a second later."""
        route = self.instance.routes.get(mq.topic)
        if route is None or time.monotonic() - route.fetched > ROUTE_RECHECK_S:
            try:
                await self.instance.route(mq.topic, refresh=True)
            except (RemotingError, MQClientError):
                pass
        if self.instance.read_addr(mq.broker_name) in (None, addr):
            await asyncio.sleep(1)

    # ---- pulling and consuming -----------------------------------------------------
    async def _pull_loop(self, state: AssignedQueue) -> None:
        mq = state.mq
        expression = self.subscriptions.get(mq.topic) or as_selector("*")
        while self.orderly and not state.dropped and \
                not await self._lock_request(RequestCode.LOCK_BATCH_MQ, [mq]):
            await asyncio.sleep(1)  # another consumer still holds the queue
        while self.running and not state.dropped:
            if len(state.in_flight) > 1000:  # flow control: let the listener catch up
                await asyncio.sleep(0.05)
                continue
            addr = self.instance.read_addr(mq.broker_name)
            try:
                result = await self.pull(mq, state.next_offset, self.pull_batch_size, expression,
                                         suspend_ms=self.pull_suspend_ms,
                                         commit_offset=state.committed if self.clustering else -1)
            except asyncio.CancelledError:
                raise
            except (RemotingError, MQClientError) as e:
                log.debug("pull %s failed: %s", mq, e)
                await self._after_failed_pull(mq, addr)
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
                    assert self._sem is not None  # made in start()
                    await self._sem.acquire()
                    asyncio.create_task(self._consume_concurrently(state, batch))

    async def _call_listener(self, msgs: list[MessageExt]) -> bool:
        try:
            assert self.listener is not None  # start() requires one
            if inspect.iscoroutinefunction(self.listener):
                outcome = await self.listener(msgs)
            else:
                outcome = await asyncio.get_running_loop().run_in_executor(None, self.listener, msgs)
        except Exception:
            log.exception("listener raised; the messages will be retried")
            return False
        return outcome is None or outcome is True or outcome is ConsumeStatus.CONSUME_SUCCESS

    async def _consume_concurrently(self, state: AssignedQueue, msgs: list[MessageExt]) -> None:
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
            assert self._sem is not None
            self._sem.release()

    async def _consume_orderly(self, state: AssignedQueue, msgs: list[MessageExt]) -> None:
        async with state.lock:
            for i in range(0, len(msgs), self.consume_batch_size):
                batch = msgs[i:i + self.consume_batch_size]
                attempts = 0
                while not state.dropped:
                    if await self._call_listener(batch):
                        break
                    attempts += 1
                    if attempts > (self.max_reconsume_times or 16) and self.clustering:
                        for m in batch:  # give up: dead-letter it and move on
                            await self._send_back(m, -1)
                        break
                    await asyncio.sleep(min(1.0, 0.1 * attempts))
                self._done(state, batch)

    def _done(self, state: AssignedQueue, msgs: list[MessageExt]) -> None:
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
                    # none given: the group's retryMaxTimes on the broker decides
                    **({} if self.max_reconsume_times is None else
                       {"maxReconsumeTimes": str(self.max_reconsume_times)})}))
            return resp.code == ResponseCode.SUCCESS
        except RemotingError:
            return False

    # ---- offsets --------------------------------------------------------------------
    async def _commit_state(self, state: AssignedQueue) -> None:
        offset = state.progress()
        if offset == state.committed:
            return
        if await self.offset_store.update(state.mq, offset):
            state.committed = offset

    async def persist_offsets(self) -> None:
        for state in list(self.queues.values()):
            await self._commit_state(state)
        self.offset_store.persist()
