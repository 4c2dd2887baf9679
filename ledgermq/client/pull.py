"""The pull API every consumer is built on, and PullConsumer (you choose queues and
offsets).

A pull names a queue and an offset and returns what the queue holds from there; the
consumer's group only decides which offset the broker records as committed. Reads go to
the queue's master, or to a slave while the master is down.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import cast

from ..remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..remoting.codes import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from ..runtime.clock import wall_ms
from .instance import ClientInstance, MQClientError, OnRequest, TlsOption
from .message import MessageExt, MessageQueue, decode_pulled



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


@dataclass(frozen=True)
class MessageSelector:
    """What a subscription selects: tags ("a || b", "*") or an SQL92 expression over the
    message's properties, evaluated on the broker (enablePropertyFilter=true there)."""
    type: str
    expression: str

    @classmethod
    def by_tag(cls, expression: str = "*") -> "MessageSelector":
        return cls("TAG", expression or "*")

    @classmethod
    def by_sql(cls, expression: str) -> "MessageSelector":
        return cls("SQL92", expression)


def as_selector(expression: "str | MessageSelector | None") -> MessageSelector:
    if isinstance(expression, MessageSelector):
        return expression
    return MessageSelector.by_tag(expression or "*")


def subscription_tags(expression: str) -> set[str] | None:
    """The tags a TAG expression ("a || b") selects; None for every message ("*")."""
    if not expression or expression.strip() == "*":
        return None
    return {t.strip() for t in expression.split("||") if t.strip()}


class ConsumerBase:
    """Queue-level requests of a consumer group: pulls, queue bounds, committed offsets."""

    def __init__(self, group: str, namesrv: str, instance: ClientInstance | None,
                 on_request: OnRequest | None = None, tls: TlsOption = None) -> None:
        self.group = group
        self.instance = instance or ClientInstance(namesrv, on_request=on_request, tls=tls)

    async def _broker_for(self, mq: MessageQueue) -> str:
        """The queue's master, or a slave while the master is down (reads only)."""
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            await self.instance.route(mq.topic, refresh=True)
            addr = self.instance.read_addr(mq.broker_name)
        if addr is None:
            raise RemotingError(f"no address for broker {mq.broker_name}")
        return addr

    async def _queue_request(self, mq: MessageQueue, code: int, ext: dict[str, str],
                             timeout: float | None = None) -> RemotingCommand:
        addr = await self._broker_for(mq)
        return await self.instance.broker_request(addr, RemotingCommand(code, ext=ext), timeout)

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return route.read_queues()

    async def _offset_call(self, mq: MessageQueue, code: int, **extra: str) -> int:
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
                   expression: "str | MessageSelector" = "*", *, suspend_ms: int = 0,
                   commit_offset: int = -1,
                   timeout: float | None = None, raw: bool = False) -> PullResult:
        """Messages of `mq` from `offset`; with `raw`, the stored bytes as the broker sent
        them (PullResult.raw, back to back) instead of decoded messages."""
        flags = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms else 0) | \
            (PULL_FLAG_COMMIT_OFFSET if commit_offset >= 0 else 0)
        sel = as_selector(expression)
        expression = sel.expression if sel.type == "TAG" else "*"  # tags filtered here too
        ext = {"consumerGroup": self.group, "topic": mq.topic, "queueId": str(mq.queue_id),
               "queueOffset": str(offset), "maxMsgNums": str(max_nums), "sysFlag": str(flags),
               "commitOffset": str(commit_offset), "suspendTimeoutMillis": str(suspend_ms),
               "subscription": sel.expression, "subVersion": str(wall_ms()),
               "expressionType": sel.type}
        resp = await self._queue_request(mq, RequestCode.PULL_MESSAGE, ext,
                                         timeout or (suspend_ms / 1000 + 5))
        nxt = int(resp.ext.get("nextBeginOffset", offset))
        lo, hi = int(resp.ext.get("minOffset", 0)), int(resp.ext.get("maxOffset", 0))
        if resp.code == ResponseCode.SUCCESS:
            if raw and (expression or "*").strip() == "*":
                return PullResult(PullStatus.FOUND, nxt, lo, hi, raw=cast(bytes, resp.body))
            msgs = decode_pulled(cast(bytes, resp.body), mq)  # a received body is bytes
            tags = subscription_tags(expression)
            if tags is not None:
                msgs = [m for m in msgs if m.tags in tags]
            return PullResult(PullStatus.FOUND, nxt, lo, hi, msgs)
        statuses: dict[int, PullStatus] = {
            ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
            ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
            ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL}
        status = statuses.get(resp.code)
        if status is None:
            raise MQClientError(resp.code, resp.remark)
        return PullResult(status, nxt, lo, hi)


class PullConsumer(ConsumerBase):
    """Pull messages from queues you choose, at offsets you choose."""

    def __init__(self, group: str = "DEFAULT_CONSUMER", namesrv: str = "127.0.0.1:9876", *,
                 instance: ClientInstance | None = None, tls: TlsOption = None) -> None:
        """`tls`: True, False, an SSLContext, or None (LEDGERMQ_TLS decides)."""
        super().__init__(group, namesrv, instance, tls=tls)

    async def start(self) -> "PullConsumer":
        return self

    async def shutdown(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> "PullConsumer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
