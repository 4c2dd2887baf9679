"""PULL_MESSAGE: messages of one queue from an offset, filtered by tag, held (long
polling) while there is nothing new; the consumer offset the pull carries is committed on
the group's master only (RocketMQ's PullMessageProcessor)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Awaitable, Callable, NamedTuple

from ...filter.sql92 import Props, compile_sql
from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...remoting.codes import (
    PERM_READ, PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND,
)
from ...remoting.transport import Handler
from ...store import GetResult, GetStatus
from ...wire.message import MessageFormatError, decode_message
from ..meta.consumers import parse_subscription
from ..refusals import Refused
from .refusal_codes import REMOTING_CODES

if TYPE_CHECKING:
    from ..broker import Broker

_PULL_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


class Query(NamedTuple):
    """What one pull asks for, as the store reads it."""
    topic: str
    qid: int
    offset: int
    max_nums: int
    codes: frozenset[int] | None
    predicate: Callable[[Props], bool] | None
    group: str


def pull_code(status: GetStatus, offset: int) -> ResponseCode:
    if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _PULL_CODES[status]


class PullProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.store = broker.store
        self.config = broker.config

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.pull, RequestCode.LITE_PULL_MESSAGE: self.pull}

    def _queues_authoritative(self) -> bool:
        """Whether an offset past this broker's queue is the consumer's error: only on the
        writable master whose queues cover its whole log (offsetCheckInSlave lets a slave
        correct offsets too, as RocketMQ's)."""
        if self.config.offsetCheckInSlave:
            return True
        return self.broker.mode.is_writable and \
            self.store.dispatch_bound >= self.store.commitlog.max_offset

    def _subscription(self, ext: dict[str, str], sys_flag: int, group: str, topic: str
                      ) -> tuple[frozenset[int] | None, Callable[[Props], bool] | None]:
        """(tag codes, SQL92 predicate) to match: from the request, else from the group's
        heartbeat. ValueError (SqlError) for an expression that does not parse."""
        if sys_flag & PULL_FLAG_SUBSCRIPTION or "subscription" in ext:
            kind, text = ext.get("expressionType") or "TAG", ext.get("subscription")
        else:
            cg = self.broker.consumers.groups.get(group)
            sub = cg.subscriptions.get(topic) if cg else None
            if sub is None:
                return None, None
            kind, text = sub.get("expressionType") or "TAG", sub.get("subString")
        if kind == "SQL92":
            return None, compile_sql(text or "")
        if kind != "TAG":
            raise ValueError(f"expression type {kind} is not supported; use TAG or SQL92")
        return parse_subscription(text), None

    def _group_refusal(self, group: str) -> tuple[int, str] | None:
        """Why the group's subscription config forbids this pull, or None."""
        try:
            sg = self.broker.subgroups.for_consumer(group)
        except Refused as e:
            return REMOTING_CODES[e.kind], str(e)
        if sg is None:
            return (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                    f"subscription group [{group}] does not exist (autoCreateSubscriptionGroup"
                    f"=false: create it with updateSubGroup)")
        if not sg.consumeEnable:
            return ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}"
        if self.broker.pop.consuming(group):  # RocketMQ: a group consumes by one model
            return (ResponseCode.NO_PERMISSION,
                    f"consumer group {group} consumes by POP (RocketMQ 5 clients) now: a "
                    f"group pulls or pops, not both; use another group name")
        cg = self.broker.consumers.groups.get(group)
        if cg is not None and cg.message_model == "BROADCASTING" and \
                not sg.consumeBroadcastEnable:
            return (ResponseCode.NO_PERMISSION,
                    f"the consumer group[{group}] can not consume by broadcast way")
        return None

    @staticmethod
    def _matching(got: GetResult, predicate: Callable[[Props], bool]) -> list[memoryview]:
        """The found messages the SQL92 predicate selects (properties only decoded)."""
        out: list[memoryview] = []
        for raw in got.messages():
            try:
                props = decode_message(raw, check_crc=False).properties
            except MessageFormatError:
                continue
            if predicate(props):
                out.append(raw)
        return out

    def pull(self, cmd: RemotingCommand, conn: Connection
             ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """Answered at once when the queue has something (or the pull may not wait); else a
        coroutine that holds it (long polling). No task for a pull that finds messages."""
        ext = cmd.ext
        group, topic = ext["consumerGroup"], ext["topic"]
        qid, offset = int(ext["queueId"]), int(ext["queueOffset"])
        max_nums = max(1, min(int(ext.get("maxMsgNums", 32)), self.config.pullBatchMaxMessages))
        sys_flag = int(ext.get("sysFlag", 0))
        tc = self.broker.topics.for_pull(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & PERM_READ:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling is forbidden")
        if not 0 <= qid < max(tc.readQueueNums, tc.writeQueueNums):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"queueId[{qid}] is illegal, topic {topic} has {tc.readQueueNums} "
                                f"read queues")
        refused = self._group_refusal(group)
        if refused is not None:
            return cmd.response(*refused)
        try:
            codes, predicate = self._subscription(ext, sys_flag, group, topic)
        except ValueError as e:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
        if predicate is not None and not self.config.enablePropertyFilter:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                "The broker does not support consumer to filter message by "
                                "SQL92: set enablePropertyFilter=true in its broker.conf")
        commit = int(ext.get("commitOffset", -1) or -1)
        if sys_flag & PULL_FLAG_COMMIT_OFFSET and commit >= 0 and self.broker.mode.is_writable:
            self.broker.offsets.commit(topic, group, qid, commit)
        query = Query(topic, qid, offset, max_nums, codes, predicate, group)
        got = self.store.get_messages(topic, qid, offset, max_nums,
                                      self.config.pullBatchMaxBytes, codes)
        code = pull_code(got.status, offset)
        # held no longer than the broker allows, whatever the request asks
        suspend_ms = min(int(ext.get("suspendTimeoutMillis", 0) or 0),
                         self.config.pullSuspendMaxMillis)
        if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PULL_FLAG_SUSPEND and \
                self.config.longPollingEnable and suspend_ms > 0:
            return self._held(cmd, query, time.monotonic() + suspend_ms / 1000)
        return self._answer(cmd, query, got, code)

    async def _held(self, cmd: RemotingCommand, q: Query, deadline: float) -> RemotingCommand:
        """A pull that found nothing, held until the queue grows or `deadline`."""
        while True:
            left = deadline - time.monotonic()
            if left > 0:
                assert self.broker.holds is not None  # set once the broker runs
                await self.broker.holds.wait(q.topic, q.qid, q.offset, left)
            got = self.store.get_messages(q.topic, q.qid, q.offset, q.max_nums,
                                          self.config.pullBatchMaxBytes, q.codes)
            code = pull_code(got.status, q.offset)
            if code != ResponseCode.PULL_NOT_FOUND or time.monotonic() >= deadline:
                return self._answer(cmd, q, got, code)

    def _answer(self, cmd: RemotingCommand, q: Query, got: GetResult,
                code: ResponseCode) -> RemotingCommand:
        offset, predicate = q.offset, q.predicate
        if code == ResponseCode.PULL_OFFSET_MOVED and offset > got.max_offset and \
                not self._queues_authoritative():
            # past what this broker's queue holds, but it is not the writable master (or
            # its queues wait for replication to confirm more): its queue is behind, not
            # the consumer. As RocketMQ's slave (offsetCheckInSlave=false): retry, keep
            # the offset, never send the consumer back to the queue's start
            return cmd.response(ResponseCode.PULL_RETRY_IMMEDIATELY, got.status.value, {
                "nextBeginOffset": str(offset), "minOffset": str(got.min_offset),
                "maxOffset": str(got.max_offset), "suggestWhichBrokerId": "0"})
        resp_ext = {"nextBeginOffset": str(got.next_begin_offset),
                    "minOffset": str(got.min_offset), "maxOffset": str(got.max_offset),
                    "suggestWhichBrokerId": "0"}
        if code == ResponseCode.SUCCESS and predicate is not None:
            selected = self._matching(got, predicate)
            if not selected:  # nothing matched: move the consumer past what was looked at
                return cmd.response(ResponseCode.PULL_RETRY_IMMEDIATELY,
                                    "no message matched the SQL92 filter", resp_ext)
            self.broker.stats.pulled(q.topic, q.group, len(selected), sum(map(len, selected)))
            return cmd.response(code, None, resp_ext, selected)
        if code == ResponseCode.SUCCESS:
            self.broker.stats.pulled(q.topic, q.group, got.message_count, got.total_bytes)
            return cmd.response(code, None, resp_ext, list(got.buffers))
        return cmd.response(code, got.status.value, resp_ext)
