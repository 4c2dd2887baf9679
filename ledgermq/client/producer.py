"""Producer: sync, async, one-way, batch and ordered sends, with retries on another queue
or broker and optional client-side batching."""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import zlib
from dataclasses import replace
from typing import Callable, Sequence, cast

from ..remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..runtime.clock import wall_ms
from ..wire.batch_body import encode_batch_body
from ..wire.message import PROPERTY_DEDUP, PROPERTY_DELAY_TIME_LEVEL, PROPERTY_UNIQ_KEY
from .faults import BrokerFaults
from .instance import AUTO_CREATE_TOPIC, ClientInstance, MQClientError, TlsOption, periodic
from .message import (
    Message, MessageQueue, Pending, SendResult, SendStatus, UniqueIdGenerator,
    properties_string,
)

log = logging.getLogger(__name__)

_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
    ResponseCode.SEND_PENDING: SendStatus.PENDING}


def _chain(src: asyncio.Future[SendResult], out: asyncio.Future[SendResult]) -> None:
    """Complete `out` as `src` completes (unless the caller gave up on `out`)."""
    def copy(f: asyncio.Future[SendResult]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif (exc := f.exception()) is not None:
            out.set_exception(exc)
        else:
            out.set_result(f.result())
    src.add_done_callback(copy)


def _send_result(status: SendStatus, uniq: str, resp: RemotingCommand,
                 q: MessageQueue) -> SendResult:
    ext = resp.ext
    pending = None
    if status is SendStatus.PENDING:
        pending = Pending(ext.get("brokerName", q.broker_name), int(ext["pendingEpoch"]),
                          int(ext["pendingEnd"]), ext["pendingId"], ext["controlNodeAddr"])
    return SendResult(status, uniq, ext.get("msgId", ""), q, int(ext.get("queueOffset", -1)),
                      pending)
_RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_BUSY}

# answers after which the route is asked for again before the next attempt
_REROUTE_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                  ResponseCode.NO_PERMISSION}
REROUTE_PAUSE_S = 0.1
ROUTE_RECHECK_S = 1.0  # how often a stale route (no master, or one doubted) is fetched again
# a master silent this long while sends wait on it: is it still the master? (looked at
# every SILENT_CHECK_S; see ClientInstance.look_past_silent_masters)
SILENT_MASTER_S, SILENT_CHECK_S = 1.0, 0.5
COALESCE_MAX_BODY = 64 * 1024  # larger messages are sent alone
COALESCE_MAX_BYTES = 1 << 20  # a held batch is sent once its bodies reach this size


def _coalescible(msg: Message) -> bool:
    """Whether a message may share a SEND_BATCH_MESSAGE request with others: batches
    cannot carry delayed or timer messages, the broker reads a batch's dedup flag from its first
    message, and a large body would make its neighbours wait. (Also the checks of
    Producer._check: a message that fails them is sent alone.)"""
    body, topic, props = msg.body, msg.topic, msg.properties
    return (type(body) is bytes and len(body) <= COALESCE_MAX_BODY and not msg.delay_level
            and not msg.deliver_time_ms and bool(topic) and topic[0] != "%"
            and (not props or (PROPERTY_DELAY_TIME_LEVEL not in props
                               and PROPERTY_DEDUP not in props
                               and not any(k.startswith("TIMER_") for k in props))))


class _Held:
    """send_async calls held for one topic's next batch request."""

    __slots__ = ("msgs", "futs", "nbytes", "timer")

    def __init__(self) -> None:
        self.msgs: list[Message] = []
        self.futs: list[asyncio.Future[SendResult]] = []
        self.nbytes = 0
        self.timer: asyncio.Handle | None = None


QueueSelector = Callable[[list[MessageQueue], Message, object], MessageQueue]


def select_by_hash(queues: list[MessageQueue], msg: Message, key: object) -> MessageQueue:
    """Ordered messages: the same key always lands on the same queue."""
    h = zlib.crc32(str(key).encode()) if not isinstance(key, int) else key
    return queues[abs(h) % len(queues)]


def encode_for_batch(body: bytes, props: str, flag: int) -> bytes:
    """One message as MessageDecoder.encodeMessage lays it out in a batch body."""
    out: bytes = encode_batch_body([body], [props.encode()], [flag])
    return out


class Producer:
    def __init__(self, group: str = "DEFAULT_PRODUCER", namesrv: str = "127.0.0.1:9876", *,
                 send_timeout: float = 3.0, retry_times: int = 2,
                 default_topic_queue_nums: int = 4, linger_ms: float = 0,
                 batch_max_messages: int = 256, coalesce: bool = True,
                 instance: ClientInstance | None = None,
                 resolve_pending: bool = True, resolve_timeout: float = 60.0,
                 tls: TlsOption = None) -> None:
        """`tls`: True, False, an SSLContext, or None (LEDGERMQ_TLS decides)."""
        self.group = group
        self.instance = instance or ClientInstance(namesrv, tls=tls)
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.default_topic_queue_nums = default_topic_queue_nums
        self.linger_ms = linger_ms
        self.batch_max_messages = batch_max_messages
        # send_async calls of one event-loop turn travel as one batch per topic
        self.coalesce = coalesce
        self.resolve_pending = resolve_pending  # settle PENDING sends before answering
        self.resolve_timeout = resolve_timeout
        self._ids = UniqueIdGenerator()
        self._rr = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self._held: dict[str, _Held] = {}
        self.faults = BrokerFaults()  # brokers passed over after a failed send
        self.started = False

    async def start(self) -> "Producer":
        self.started = True
        self._tasks = [asyncio.create_task(periodic(30, self._heartbeat, "producer heartbeat")),
                       asyncio.create_task(periodic(30, self._refresh_routes, "route refresh")),
                       asyncio.create_task(periodic(
                           SILENT_CHECK_S, self._look_past_silent_masters, "silent masters"))]
        return self

    async def shutdown(self) -> None:
        for topic in list(self._held):
            await self._flush_topic(topic)
        for t in self._tasks:
            t.cancel()
        self.started = False
        await self.instance.close()

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _heartbeat(self) -> None:
        await self.instance.heartbeat([self.group], [])

    async def _look_past_silent_masters(self) -> None:
        await self.instance.look_past_silent_masters(SILENT_MASTER_S)

    async def _refresh_routes(self) -> None:
        for topic in list(self.instance.routes):
            await self.instance.fetch_route(topic)

    # ---- routing --------------------------------------------------------------------
    async def queues(self, topic: str) -> list[MessageQueue]:
        route = self.instance.routes.get(topic)
        if route is not None and route.stale(ROUTE_RECHECK_S):
            # a group had no master when the route was fetched, or its master refused as
            # not being one (a failover under way): ask again for its new master now, not
            # at the 30 s refresh, or its queues stay unused (or refused) that long (found
            # by the chaos runner: 22 s after a master was replaced; 14 s of refusals to a
            # selector's sends by a DLedger leader deposed by a partition)
            route = await self.instance.route(topic, refresh=True)
        route = route or await self.instance.route(topic)
        queues = route.write_queues() if route is not None else None
        if not queues:
            template = await self.instance.route(AUTO_CREATE_TOPIC, refresh=True)
            if template is None:
                raise MQClientError(ResponseCode.TOPIC_NOT_EXIST,
                                    f"No route info of this topic: {topic}")
            queues = [q for q in template.write_queues(topic)
                      if q.queue_id < self.default_topic_queue_nums]
            if not queues:
                raise MQClientError(ResponseCode.TOPIC_NOT_EXIST,
                                    f"No route info of this topic: {topic}")
            self.instance.routes.pop(topic, None)  # look again once the broker created it
        return queues

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        return self.faults.pick(queues, next(self._rr), avoid)

    # ---- single sends ---------------------------------------------------------------
    def _request(self, code: int, msg_topic: str, queue: MessageQueue, props: str,
                 body: bytes, flag: int, batch: bool, sys_flag: int = 0) -> RemotingCommand:
        return RemotingCommand(code, ext={
            "a": self.group, "b": msg_topic, "c": AUTO_CREATE_TOPIC,
            "d": str(self.default_topic_queue_nums), "e": str(queue.queue_id),
            "f": str(sys_flag),
            "g": str(wall_ms()), "h": str(flag), "i": props, "j": "0",
            "k": "false", "m": str(batch).lower()}, body=body)

    async def send(self, msg: Message, queue: MessageQueue | None = None, *,
                   selector: QueueSelector | None = None, arg: object = None) -> SendResult:
        """Send one message and wait for the broker's answer (retried elsewhere on failure
        unless the queue was chosen by the caller)."""
        if selector is None:  # not held for coalescing: the caller waits for this one
            self._check(msg)
            return await self._send_single(msg, queue)
        return await self._send_slow(msg, queue, selector, arg)

    async def _send_slow(self, msg: Message, queue: MessageQueue | None = None,
                         selector: QueueSelector | None = None,
                         arg: object = None) -> SendResult:
        """send() through route lookups, connecting and retries."""
        self._check(msg)
        props = msg.all_properties()
        uniq = props.setdefault(PROPERTY_UNIQ_KEY, self._ids.next())
        props.setdefault("WAIT", "true")
        return await self._send_with_retries(
            msg.topic, queue, selector, msg, arg,
            lambda q: self._request(RequestCode.SEND_MESSAGE_V2, msg.topic, q,
                                    properties_string(props), msg.body, msg.flag, False),
            uniq)

    def send_async(self, msg: Message,
                   queue: MessageQueue | None = None) -> asyncio.Future[SendResult]:
        """Send without waiting: returns a future of the SendResult (call from the loop).

        When the route and connection are at hand, no task is created (the fast path for
        pipelined producers); otherwise, and on any failure, it falls back to send() with
        its retries."""
        if queue is None and (self.coalesce or self.linger_ms > 0) and _coalescible(msg):
            return self._enqueue(msg)
        self._check(msg)
        return self._send_single(msg, queue)

    def _send_single(self, msg: Message,
                     queue: MessageQueue | None) -> asyncio.Future[SendResult]:
        """One SEND_MESSAGE_V2 request, straight onto the connection when it is open."""
        route = self.instance.routes.get(msg.topic)
        queues = route.write_queues() if route is not None else None
        q = queue or (self._pick(queues, None) if queues else None)
        addr = self.instance.master_addr(q.broker_name) if q else None
        conn = self.instance.remoting.open_connection(addr) if addr else None
        if conn is None:
            return asyncio.ensure_future(self._send_slow(msg, queue))
        assert q is not None  # a connection was found for its broker
        props = msg.all_properties()
        uniq = props.setdefault(PROPERTY_UNIQ_KEY, self._ids.next())
        props.setdefault("WAIT", "true")
        cmd = self._request(RequestCode.SEND_MESSAGE_V2, msg.topic, q, properties_string(props),
                            msg.body, msg.flag, False)
        out: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()

        def done(f: asyncio.Future[RemotingCommand]) -> None:
            status: SendStatus | None = None
            if not f.cancelled() and f.exception() is None:
                resp = f.result()
                status = _STATUS.get(resp.code)
            if status is not None:
                result = _send_result(status, uniq, resp, q)
                if status is SendStatus.PENDING and self.resolve_pending:
                    _chain(asyncio.ensure_future(self._settle(result, msg, queue)), out)
                elif not out.done():
                    out.set_result(result)
            else:  # retry the slow way (another queue or broker)
                if not f.cancelled() and isinstance(f.exception(), RemotingError):
                    self.faults.isolate(q.broker_name)
                _chain(asyncio.ensure_future(self._send_slow(msg, queue)), out)
        try:
            conn.request_future(cmd, self.send_timeout).add_done_callback(done)
        except RemotingError:
            return asyncio.ensure_future(self._send_slow(msg, queue))
        return out

    # ---- PENDING (checkpoint mode, S3-4) -------------------------------------------
    async def resolve(self, result: SendResult, timeout: float | None = None) -> str:
        """Ask the control node what became of a PENDING send until it knows: "DONE" (it
        is in the log, safely) or "RESEND" (it is not: send it again)."""
        p = result.pending
        if p is None:
            raise ValueError(f"a {result.status.value} result has nothing to resolve")
        deadline = time.monotonic() + (timeout or self.resolve_timeout)
        cmd = RemotingCommand(RequestCode.CONTROL_RESOLVE, ext={
            "brokerName": p.broker_name, "epoch": str(p.epoch), "end": str(p.end),
            "msgId": p.msg_id})
        # one control node, or a group whose leader answers (the others name it)
        addrs = [a.strip() for a in p.control_node.split(";") if a.strip()]
        at = 0
        while time.monotonic() < deadline and addrs:
            try:
                r = await self.instance.broker_request(addrs[at], cmd, 3.0)
                if r.code == ResponseCode.SUCCESS:
                    answer: str = json.loads(cast(bytes, r.body))["resolution"]
                    if answer in ("DONE", "RESEND"):
                        return answer
                    await asyncio.sleep(0.2)  # not known yet: ask again
                    continue
                hint = (r.ext or {}).get("leaderAddr", "")
                at = addrs.index(hint) if hint in addrs else (at + 1) % len(addrs)
            except RemotingError as e:
                log.debug("control node %s: %s", addrs[at], e)
                at = (at + 1) % len(addrs)
            await asyncio.sleep(0.2)
        raise MQClientError(ResponseCode.SYSTEM_ERROR, f"send {result.msg_id} still PENDING "
                            f"after {timeout or self.resolve_timeout}s: the control node "
                            f"{p.control_node} could not tell")

    async def _settle(self, result: SendResult, msg: Message,
                      queue: MessageQueue | None) -> SendResult:
        if await self.resolve(result) == "DONE":
            return replace(result, status=SendStatus.SEND_OK, pending=None)
        return await self._send_slow(msg, queue)

    async def send_orderly(self, msg: Message, sharding_key: object) -> SendResult:
        """All messages with the same key go to one queue, in order."""
        return await self.send(msg, selector=select_by_hash, arg=sharding_key)

    async def send_oneway(self, msg: Message, queue: MessageQueue | None = None) -> None:
        self._check(msg)
        queues = [queue] if queue else await self.queues(msg.topic)
        q = queue or self._pick(queues, None)
        props = msg.all_properties()
        props.setdefault(PROPERTY_UNIQ_KEY, self._ids.next())
        addr = self.instance.master_addr(q.broker_name)
        if addr is None:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, f"no address for {q.broker_name}")
        conn = await self.instance.remoting.connection(addr)
        conn.oneway(self._request(RequestCode.SEND_MESSAGE_V2, msg.topic, q,
                                  properties_string(props), msg.body, msg.flag, False))

    async def send_batch(self, msgs: Sequence[Message],
                         queue: MessageQueue | None = None) -> SendResult:
        """Messages of one topic in one request, stored together on one queue."""
        if not msgs:
            raise ValueError("send_batch needs at least one message")
        topic = msgs[0].topic
        for m in msgs:
            self._check(m)
            if m.topic != topic:
                raise ValueError("all messages of a batch must have the same topic")
            if m.delay_level:
                raise ValueError("delayed messages cannot be sent in a batch")
        return await self._send_batch_checked(msgs, topic, queue)

    async def _send_batch_checked(self, msgs: Sequence[Message], topic: str,
                                  queue: MessageQueue | None) -> SendResult:
        uniqs = self._ids.next_many(len(msgs))
        props: list[bytes] = []
        for m, uniq in zip(msgs, uniqs):
            if m.properties or m.tags or m.keys:
                own = m.all_properties()
                if PROPERTY_UNIQ_KEY in own:  # the caller's id (idempotent resends) wins
                    uniqs[len(props)] = uniq = own.pop(PROPERTY_UNIQ_KEY)
                static = properties_string(own)
            else:
                static = ""
            props.append(f"{static}UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02".encode())
        return await self.send_encoded_batch(topic, [m.body for m in msgs], props,
                                             [m.flag for m in msgs], uniqs, queue)

    async def send_encoded_batch(self, topic: str, bodies: Sequence[bytes],
                                 props: Sequence[bytes], flags: Sequence[int],
                                 uniqs: Sequence[str],
                                 queue: MessageQueue | None = None) -> SendResult:
        """send_batch for callers that built each message's properties string themselves
        (RocketMQ's name\x01value\x02 pairs, UNIQ_KEY included): no Message objects."""
        body = encode_batch_body(bodies, props, flags)
        return await self._send_with_retries(
            topic, queue, None, None, None,
            lambda q: self._request(RequestCode.SEND_BATCH_MESSAGE, topic, q, "", body, 0, True),
            ",".join(uniqs))

    async def _send_with_retries(self, topic: str, queue: MessageQueue | None,
                                 selector: QueueSelector | None, msg: Message | None,
                                 arg: object, build: Callable[[MessageQueue], RemotingCommand],
                                 uniq: str) -> SendResult:
        attempts = 1 if queue is not None else 1 + self.retry_times
        avoid: str | None = None
        last: Exception | None = None
        deadline = time.monotonic() + self.send_timeout
        for _ in range(attempts):
            if queue is not None:
                q = queue
            else:
                queues = await self.queues(topic)
                # a selector comes with its message (send() and send_orderly())
                q = selector(queues, cast(Message, msg), arg) if selector else \
                    self._pick(queues, avoid)
            addr = self.instance.master_addr(q.broker_name)
            try:
                if addr is None:
                    raise RemotingError(f"no master address for broker {q.broker_name}")
                left = max(0.05, deadline - time.monotonic())
                resp = await self.instance.broker_request(addr, build(q), left)
            except RemotingError as e:
                last, avoid = e, q.broker_name
                self.faults.isolate(q.broker_name)
                await self.instance.route(topic, refresh=True)
                continue
            status = _STATUS.get(resp.code)
            if status is SendStatus.PENDING and self.resolve_pending:
                result = _send_result(status, uniq, resp, q)
                if await self.resolve(result) == "DONE":
                    return replace(result, status=SendStatus.SEND_OK, pending=None)
                continue  # RESEND: it is not in the log; send it again
            if status is not None:
                return _send_result(status, uniq, resp, q)
            last = MQClientError(resp.code, resp.remark)
            route = self.instance.routes.get(topic)
            if resp.code in _REROUTE_CODES and route is not None:
                route.doubted = True  # the next send asks for the route again (at most 1/s)
            if resp.code not in _RETRY_CODES or selector is not None:
                raise last
            avoid = q.broker_name
            if resp.code in _REROUTE_CODES:  # e.g. "not the master now": a failover is on
                await asyncio.sleep(REROUTE_PAUSE_S)
                await self.instance.route(topic, refresh=True)
        if isinstance(last, MQClientError):
            raise last
        raise RemotingError(f"send to {topic} failed after {attempts} attempts: {last}")

    @staticmethod
    def _check(msg: Message) -> None:
        if not msg.topic:
            raise ValueError("message topic is empty")
        if not isinstance(msg.body, (bytes, bytearray, memoryview)):
            raise TypeError("message body must be bytes")

    # ---- client-side batching -------------------------------------------------------
    def _enqueue(self, msg: Message) -> asyncio.Future[SendResult]:
        """Hold `msg` for the topic's next batch: sent when full, else after linger_ms, or
        (linger_ms=0) once the calls of this event-loop turn are made. Nothing waits longer
        than it would have anyway: the loop could not write before the turn ends."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[SendResult] = loop.create_future()
        topic = msg.topic
        held = self._held.get(topic)
        if held is None:
            held = self._held[topic] = _Held()
            held.timer = loop.call_later(self.linger_ms / 1000, self._take, topic) \
                if self.linger_ms > 0 else loop.call_soon(self._take, topic)
        held.msgs.append(msg)
        held.futs.append(fut)
        held.nbytes += len(msg.body)
        if len(held.msgs) >= self.batch_max_messages or held.nbytes >= COALESCE_MAX_BYTES:
            self._take(topic)
        return fut

    def _take(self, topic: str) -> None:
        """Send what is held for `topic` now."""
        held = self._held.pop(topic, None)
        if held is None:
            return
        assert held.timer is not None  # set as it was made (_enqueue)
        held.timer.cancel()
        if len(held.msgs) == 1:  # nothing to coalesce with: the plain single send
            _chain(self._send_single(held.msgs[0], None), held.futs[0])
        else:
            asyncio.ensure_future(self._send_held(held.msgs, held.futs))

    async def _flush_topic(self, topic: str) -> None:
        held = self._held.pop(topic, None)
        if held is None:
            return
        assert held.timer is not None  # set as it was made (_enqueue)
        held.timer.cancel()
        step = self.batch_max_messages
        for i in range(0, len(held.msgs), step):
            await self._send_held(held.msgs[i:i + step], held.futs[i:i + step])

    async def _send_held(self, msgs: list[Message],
                         futs: list[asyncio.Future[SendResult]]) -> None:
        try:
            result = await self._send_batch_checked(msgs, msgs[0].topic, None)
        except Exception as e:
            if isinstance(e, MQClientError) and e.code == ResponseCode.MESSAGE_ILLEGAL:
                for m, fut in zip(msgs, futs):  # refused whole, nothing stored: each
                    _chain(self._send_single(m, None), fut)  # alone, only the bad one fails
                return
            for fut in futs:
                if not fut.done():
                    fut.set_exception(e)
            return
        ids = result.msg_id.split(",")
        offsets = result.offset_msg_id.split(",")
        for j, fut in enumerate(futs):
            if not fut.done():
                fut.set_result(SendResult(result.status, ids[j],
                                          offsets[j] if j < len(offsets) else "",
                                          result.queue, result.queue_offset + j,
                                          result.pending))
