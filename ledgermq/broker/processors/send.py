"""SEND_MESSAGE (V1, V2, batches) and CONSUMER_SEND_MSG_BACK: checks, topic creation,
retries and dead letters, delays; then a write through the replication mode, answered
once the mode's acknowledgement holds (RocketMQ's SendMessageProcessor)."""
from __future__ import annotations

import asyncio
import inspect
import random
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ...remoting import Connection, RemotingCommand, ReplyWhen, RequestCode, ResponseCode
from ...remoting.codes import PERM_WRITE, RETRY_PREFIX
from ...remoting.transport import Handler
from ...replication.checkpoint import Resolution
from ...runtime.clock import wall_ms
from ...store import PutResult, PutStatus, StoreError
from ...store.mapped_file import DISK_FULL_ERRNOS
from ...store.store import check_topic
from ...wire.message import (
    PROPERTY_RETRY_TOPIC, PROPERTY_UNIQ_KEY, SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED, MessageFormatError, StoredMessage, decode_properties,
    pack_host, property_value,
)
from ..access.system_topics import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, client_may_send
from ..delivery.redelivery import redelivery
from ..delivery.timer import deliver_time, to_timer
from ..delivery.transactions import to_half
from ..modes import Later, Pending
from ..refusals import Refused
from .refusal_codes import REMOTING_CODES
from ..send_parsing import (
    MARK_BROKER_ONLY, MARK_DEDUP, MARK_TIMER, MARK_ZERO_END, BatchBody, drop_stored,
    index_keys, may_hold_broker_properties, read_send, scan_send_properties,
    split_batch_body, tags_of, to_schedule, with_properties, without_broker_properties,
)

if TYPE_CHECKING:
    from ..broker import Broker
    from ..meta.topic_table import TopicConfig

# clients that send this language (ledgermq's) understand SEND_PENDING and resolve it
PENDING_AWARE_LANGUAGE = "PYTHON"

_SEND_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
}
_STORED = {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
           PutStatus.SLAVE_NOT_AVAILABLE}
LOCALHOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"


def storage_refusal(e: OSError, what: str) -> tuple[int, str]:
    """The response to a write the broker's own files refused: a full disk is
    SERVICE_NOT_AVAILABLE, as RocketMQ answers it (the client tries another broker)."""
    if e.errno in DISK_FULL_ERRNOS:
        return ResponseCode.SERVICE_NOT_AVAILABLE, f"disk full: {what}: {e.strerror}"
    return ResponseCode.SYSTEM_ERROR, f"{what}: {e}"


class SendProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.store = broker.store
        self.config = broker.config
        self.topics = broker.topics

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.SEND_MESSAGE: self.send, RequestCode.SEND_MESSAGE_V2: self.send,
                RequestCode.SEND_BATCH_MESSAGE: self.send,
                RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    def send(self, cmd: RemotingCommand,
             conn: Connection) -> RemotingCommand | ReplyWhen | Awaitable[RemotingCommand]:
        """Answered at once when nothing needs waiting for, else when the mode says."""
        why = self.broker.mode.refuse_write()
        if why is not None:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, why)
        (topic, default_topic, default_queues, queue_id, sys_flag, born_ts, flag, reconsumed,
         max_reconsume, batched, props, tags, keys, marks, level) = read_send(cmd.ext)
        try:
            check_topic(topic)
        except MessageFormatError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        if not client_may_send(topic):
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"Sending message to topic[{topic}] is forbidden.")
        tc = self.topics.get(topic)
        if tc is None:
            try:
                tc = self.topics.new_for_send(topic, default_topic, default_queues)
            except Refused as e:
                return cmd.response(REMOTING_CODES[e.kind], str(e))
            if tc is None:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"topic[{topic}] not exist, apply first please!")
            return self._send_creating(cmd, conn, tc)
        if not tc.perm & PERM_WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"the topic[{topic}] sending is forbidden")
        qid = queue_id if queue_id >= 0 else random.randrange(tc.writeQueueNums)
        if qid >= tc.writeQueueNums:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"request queueId[{qid}] is illegal, topic {topic} has "
                                f"{tc.writeQueueNums} write queues")
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or batched:
            try:
                batch = split_batch_body(cmd.body, props)  # type: ignore[arg-type]  # (bytes)
            except MessageFormatError as e:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
            if may_hold_broker_properties(cmd.body, props):  # type: ignore[arg-type]
                batch.props = [without_broker_properties(bytes(p)) for p in batch.props]
            else:  # (views without the header's properties: the checks below read bytes)
                batch.props = [p if type(p) is bytes else bytes(p) for p in batch.props]
            if any(p[-1:] == b"\0" for p in batch.props):
                marks = MARK_ZERO_END
            elif batch.props:  # (a batch of one may be delayed or a timer message)
                _, _, marks, level = scan_send_properties(batch.props[0])
                if len(batch.props) > 1:
                    marks, level = marks & MARK_DEDUP, 0
        else:
            if marks & MARK_BROKER_ONLY:
                props = without_broker_properties(props)
                _, _, marks, level = scan_send_properties(props)
            batch = BatchBody([cmd.body], [props], [flag], [tags], [keys])  # type: ignore[list-item]
        if marks & MARK_ZERO_END:  # (recovery would read it as a torn write)
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                "the message's properties end with a zero byte")
        index = self.store.index
        if marks & MARK_DEDUP and index is not None:
            # an idempotent (retried) send: what is stored already is not stored twice
            drop_stored(batch, lambda key: bool(self.store.query_by_key(topic, key, 1)),
                        lambda keys: index.maybe_present(topic, keys))
            if not batch.bodies:
                return cmd.response(ResponseCode.SUCCESS, "every message was stored before",
                                    {"msgId": "", "queueId": str(qid), "queueOffset": "-1"})
        if topic.startswith(RETRY_PREFIX):
            sg = self.broker.subgroups.get(topic[len(RETRY_PREFIX):])
            max_times = max_reconsume if max_reconsume is not None \
                else sg.retryMaxTimes if sg else self.config.maxReconsumeTimes
            if reconsumed >= max_times:
                topic, qid = self.topics.dlq(topic[len(RETRY_PREFIX):])
        if sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED:
            if len(batch.bodies) != 1:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                    "a batch cannot be a transactional (half) message")
            # invisible until END_TRANSACTION commits it to its real topic and queue
            # (its UNIQ_KEY is the transaction's id: RocketMQ's proxy ends it by that)
            tx_id = property_value(bytes(batch.props[0]), PROPERTY_UNIQ_KEY) or ""
            batch.props = [to_half(bytes(batch.props[0]), topic, qid)]
            topic, qid = TRANS_HALF_TOPIC, 0
            return self.put(cmd, conn, topic, qid, batch, sys_flag & ~SYSFLAG_TRANSACTION_MASK,
                            born_ts, reconsumed, tx_id)
        if marks & MARK_TIMER:
            decoded = decode_properties(bytes(batch.props[0]))
            now = wall_ms()
            try:
                at = deliver_time(decoded, now)
            except ValueError as e:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
            if at is not None and at - now > self.config.timerMaxDelaySec * 1000:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, (
                    f"timer message due in {(at - now) / 1000:.0f} s: the most is "
                    f"timerMaxDelaySec={self.config.timerMaxDelaySec} s"))
            if at is not None and at > now:  # waits in the timer topic until due
                batch.props = [to_timer(decoded, topic, qid, at)]
                return self.put(cmd, conn, TIMER_TOPIC, 0, batch, sys_flag, born_ts,
                                reconsumed)
        if level > 0:
            batch.props = [to_schedule(bytes(batch.props[0]), topic, qid)]
            topic, qid = SCHEDULE_TOPIC, min(level, len(self.config.delay_levels_ms)) - 1
        return self.put(cmd, conn, topic, qid, batch, sys_flag, born_ts, reconsumed)

    def put(self, cmd: RemotingCommand, conn: Connection, topic: str, qid: int,
            batch: BatchBody, sys_flag: int, born_ts: int, reconsume_times: int,
            transaction_id: str = "") -> RemotingCommand | ReplyWhen:
        """Encode and write; the response, or a ReplyWhen of it."""
        born_host = conn.attrs.get("born_host")
        if born_host is None:
            try:
                host, port = conn.peer.rsplit(":", 1)
                born_host = pack_host(host, int(port))
            except (OSError, ValueError):
                born_host = LOCALHOST
            conn.attrs["born_host"] = born_host
        try:
            encoded = self.store.encode(
                topic, qid, batch.bodies, batch.props, batch.tags, flag=batch.flags,
                sys_flag=sys_flag, born_timestamp=born_ts, born_host=born_host,
                reconsume_times=reconsume_times, index_keys=batch.index_keys)
        except MessageFormatError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        outcome = self.broker.mode.write(encoded)
        if type(outcome) is Later or getattr(outcome, "status", None) in _STORED:
            self.broker.stats.put(topic, len(batch.bodies), len(encoded.buf))
        if type(outcome) is Later:
            settle, future = outcome.settle, outcome.future
            if outcome.may_pend and cmd.language != PENDING_AWARE_LANGUAGE:
                future = asyncio.ensure_future(_resolved_by_broker(future, settle))
                settle = _as_is
            return ReplyWhen(future, lambda value: self.respond(cmd, qid, settle(value),
                                                                transaction_id))
        # (not a Later here)
        return self.respond(cmd, qid, outcome, transaction_id)  # type: ignore[arg-type]

    def respond(self, cmd: RemotingCommand, qid: int, outcome: PutResult | Pending,
                transaction_id: str = "") -> RemotingCommand:
        if type(outcome) is Pending:
            return self._pending(cmd, qid, outcome)
        result: PutResult = outcome  # type: ignore[assignment]  # (no cast call per send)
        code = _SEND_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
        if result.status not in _STORED:
            return cmd.response(code, f"{result.status.value}: {result.error}")
        ext = {"msgId": result.msg_id_text(self.broker.store_host), "queueId": str(qid),
               "queueOffset": str(result.queue_offset), "MSG_REGION": "DefaultRegion",
               "TRACE_ON": "true"}
        if transaction_id:
            ext["transactionId"] = transaction_id
        return cmd.response(code, None if code == ResponseCode.SUCCESS else result.error, ext)

    def _pending(self, cmd: RemotingCommand, qid: int, p: Pending) -> RemotingCommand:
        result = p.result
        if cmd.language != PENDING_AWARE_LANGUAGE:
            # RocketMQ's own clients know no PENDING (an unknown code is an error to them):
            # the broker resolved it while they waited (put). DONE is a SEND_OK; RESEND a
            # refusal they retry. Still unknown: FLUSH_SLAVE_TIMEOUT, their status for
            # "stored on the master, not confirmed by a slave"; Java's does not resend it
            # by default, the C++ client resends any non-SEND_OK.
            if p.resolution is Resolution.DONE:
                return self.respond(cmd, qid, result)
            if p.resolution is Resolution.RESEND:
                return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, (
                    f"send {p.msg_id} was not kept: another master took over before it was "
                    "safe; send it again"))
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.error = f"pending {p.msg_id}: {p.why}; a failover may roll it back"
            return self.respond(cmd, qid, result)
        resp = self.respond(cmd, qid, result)
        resp.code = ResponseCode.SEND_PENDING
        resp.remark = f"{p.why}: resolve before resending"
        resp.ext.update(pendingEpoch=str(p.epoch), pendingEnd=str(result.end_offset),
                        pendingId=p.msg_id, controlNodeAddr=self.config.controlNodeAddr,
                        brokerName=self.config.brokerName)
        return resp

    async def _send_creating(self, cmd: RemotingCommand, conn: Connection,
                             tc: TopicConfig) -> RemotingCommand:
        """A send that auto-creates its topic: the topic table is saved (fsync) off the
        event loop first, then the send goes on as to any topic."""
        try:
            await self.topics.create_off_loop(tc)
        except OSError as e:  # its config could not be written
            return cmd.response(*storage_refusal(e, f"topic {tc.topicName} not created"))
        r = self.send(cmd, conn)
        if isinstance(r, ReplyWhen):  # waits for a flush, a slave or a quorum
            r = r.respond(await r.future)
        elif inspect.isawaitable(r):
            r = await r
        return r

    def _not_the_groups(self, group: str, msg: StoredMessage) -> str | None:
        """Why the message at a send-back's offset is not one `group` consumed, or None:
        else any client could copy any message into its own retry topic and read it."""
        origin = msg.properties.get(PROPERTY_RETRY_TOPIC) or msg.topic
        if msg.topic == RETRY_PREFIX + group or self.broker.consumers.subscribes(group, origin) \
                or self.broker.pop.pops(group, origin):
            return None
        return (f"the message at offset {msg.phys_offset} is in topic {origin}, which no "
                f"consumer of group {group[:128]} online here subscribes: not sent back")

    async def send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """A consumer's failed message: to %RETRY%<group> after a delay level, or to
        %DLQ%<group> after maxReconsumeTimes."""
        why = self.broker.mode.refuse_write()
        if why is not None:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, why)
        ext = cmd.ext
        group = ext["group"]
        try:
            msg = self.store.message_at(int(ext["offset"]))
        except (StoreError, MessageFormatError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed: {e}")
        why = self._not_the_groups(group, msg)
        if why is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, why)
        delay = int(ext.get("delayLevel") or 0)
        given_max = ext.get("maxReconsumeTimes")
        topic, qid, props, dead = redelivery(self.broker, group, msg, ext.get("originMsgId"),
                                             give_up=delay < 0,
                                             max_times=int(given_max) if given_max else None)
        if dead:
            props.pop("DELAY", None)
        else:
            props["DELAY"] = str(delay if delay > 0 else 3 + msg.reconsume_times)
        raw = with_properties(b"", props)
        if topic.startswith(RETRY_PREFIX):
            raw = to_schedule(raw, topic, qid)
            level = int(props["DELAY"])
            topic, qid = SCHEDULE_TOPIC, min(level, len(self.config.delay_levels_ms)) - 1
        r = self.put(cmd, conn, topic, qid,
                     BatchBody([msg.body], [raw], [msg.flag], [tags_of(raw)], [index_keys(raw)]),
                     msg.sys_flag, msg.born_timestamp, msg.reconsume_times + 1)
        if isinstance(r, ReplyWhen):  # waits for a flush, a slave or a quorum
            r = r.respond(await r.future)
        return cmd.response(r.code, r.remark)


async def _resolved_by_broker(future: asyncio.Future[Any], settle: Callable[[Any], object]
                              ) -> object:
    """A send's outcome for a client that knows no PENDING: a Pending is resolved by the
    broker (S3-4) while that client still waits for its answer."""
    outcome = settle(await future)
    if type(outcome) is Pending:
        outcome.resolution = await outcome.resolve()
    return outcome


def _as_is(outcome: Any) -> Any:
    return outcome
