"""apache.rocketmq.v2.MessagingService on the broker: RocketMQ 5 clients (every official
one speaks only this) send, receive by POP, ack and end transactions here. Each call
becomes what the broker already does for remoting clients (a send is a SEND_MESSAGE
through the same processor and replication mode), so both kinds of clients share topics
and every guarantee."""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
import zlib
from typing import TYPE_CHECKING, AsyncGenerator, AsyncIterator

from ...apis import definition_pb2 as pb
from ...apis import service_pb2 as svc
from ...filter.sql92 import SqlError
from ...remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ...runtime.clock import wall_ms
from ...wire.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
    encode_properties,
)
from ..pop.filters import Filter, pop_filter
from ..refusals import Kind, Refused
from . import encoded
from .auth import (
    answers_refusals, authenticated, authorize, authorize_consume, caller, permits,
    streams_refusals,
)
from .channel import CallOf, ClientChannel, call
from .convert import (
    PROPERTY_MESSAGE_GROUP, duration, properties_of, refused_status, status, timestamp,
    to_grpc_into, to_ms, transaction_group,
)
from .offset_calls import OffsetCalls
from .renewal import AutoRenewal
from .routes import message_queues, route_doc

if TYPE_CHECKING:
    from google.protobuf.duration_pb2 import Duration

    from ...grpcserver import Context

    from ..broker import Broker

log = logging.getLogger(__name__)

OK = status(pb.OK)  # (a response copies it in)
DEFAULT_INVISIBLE_MS = 30_000
DEFAULT_POLL_MS = 20_000
POLL_SLICE_S = 0.5  # a waiting receive looks again at least this often (revived messages)
TELEMETRY_OUTBOX = 1024  # commands a client's stream may leave unread (then: closed/dropped)

# the broker's remoting answers in the API's terms
_SEND_STATUS: dict[int, pb.Code] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
}


Sent = tuple[str, int, str]  # a message stored: (message id, queue offset, transaction id)


def _entry(one: svc.SendResultEntry | Sent) -> svc.SendResultEntry:
    if not isinstance(one, tuple):
        return one
    message_id, offset, transaction_id = one
    return svc.SendResultEntry(status=OK, message_id=message_id, offset=offset,
                               transaction_id=transaction_id)


def ms_of(d: Duration, default: int) -> int:
    ms = d.seconds * 1000 + d.nanos // 1_000_000
    return ms if ms > 0 else default


class MessagingService(OffsetCalls):
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.channels: dict[str, ClientChannel] = {}
        self.renewal = AutoRenewal(broker.pop, self.channels)
        self._sends = itertools.count()  # spreads sends over the queues

    # ---- clients --------------------------------------------------------------------
    def _caller(self, context: Context) -> CallOf:
        """The calling client's channel; Refused (CLIENT_ID_REQUIRED) for a call naming none."""
        c = self._client(context)
        if c is None:
            # every call but a route query names its client (RocketMQ 5 clients do)
            raise Refused(Kind.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is missing")
        return c

    def _client(self, context: Context) -> CallOf | None:
        """The calling client's channel (made at its first call) as this call sees it."""
        client_id = context.metadata_value("x-mq-client-id")
        if not client_id:
            return None
        ch = self.channels.get(client_id)
        if ch is None:
            self._forget_idle()
            ch = self.channels[client_id] = ClientChannel(client_id,
                                                          context.peer())
        ch.last_seen = time.monotonic()
        # (the caller is authenticated by now; the broker's permission checks use its account)
        return CallOf(ch, caller(self.broker, context))

    def _owner(self, context: Context, c: CallOf) -> tuple[str, str | None]:
        key = c.acl_account.access_key if c.acl_account else None
        return context.peer(), key

    def _check_owner(self, context: Context, c: CallOf) -> None:
        """Refused (CLIENT_ID_TAKEN) when another connection or account has this client
        id's telemetry stream open (a client id is only a name)."""
        ch = c.channel
        if ch.is_open and ch.owner != self._owner(context, c):
            raise Refused(Kind.CLIENT_ID_TAKEN, (
                f"client id {ch.client_id} has a telemetry stream open from another "
                "connection or account: a client id belongs to the connection that "
                "opened its stream"))

    def _forget_idle(self) -> None:
        """Clients gone without saying so (no stream, no call for the idle time)."""
        idle = self.broker.config.clientChannelMaxIdleTimeSeconds
        now = time.monotonic()
        for cid, ch in list(self.channels.items()):
            if not ch.is_open and now - ch.last_seen > idle:
                ch.close()
                del self.channels[cid]

    def connections(self) -> list[ClientChannel]:
        return [c for c in self.channels.values() if c.is_open]

    def _server_settings(self, ch: ClientChannel, theirs: pb.Settings,
                         context: Context) -> pb.Settings:
        cfg = self.broker.config
        out = pb.Settings()
        out.CopyFrom(theirs)
        out.metric.CopyFrom(pb.Metric(on=False))
        if theirs.WhichOneof("pub_sub") == "publishing":
            out.publishing.max_body_size = self.broker.store.config.maxMessageSize
            out.publishing.validate_message_type = False
            backoff = pb.ExponentialBackoff(initial=duration(100), max=duration(2000),
                                            multiplier=2)
            out.backoff_policy.CopyFrom(pb.RetryPolicy(max_attempts=3,
                                                       exponential_backoff=backoff))
            # check-backs of a topic's transactions only to a caller that may publish to it,
            # and only of topics that exist (what a client may name is otherwise unbounded)
            ch.attrs["producer_groups"] = {
                transaction_group(t.name) for t in theirs.publishing.topics
                if self.broker.topics.get(t.name) is not None and
                permits(self.broker, context, RequestCode.SEND_MESSAGE, {"topic": t.name})}
        elif theirs.WhichOneof("pub_sub") == "subscription":
            group = theirs.subscription.group.name
            try:
                sg = self.broker.subgroups.for_consumer(group)
            except Refused:
                sg = None  # (its receives say why)
            attempts = (sg.retryMaxTimes if sg else cfg.maxReconsumeTimes) + 1
            out.subscription.fifo = bool(sg and sg.consumeMessageOrderly)
            out.subscription.receive_batch_size = 32
            if not theirs.subscription.HasField("long_polling_timeout"):
                out.subscription.long_polling_timeout.CopyFrom(duration(DEFAULT_POLL_MS))
            out.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=attempts, customized_backoff=pb.CustomizedBackoff(
                    # whole seconds (clients read only those), at least the 1 s an
                    # invisibility change may ask for
                    next=[duration(max(1000, -(-ms // 1000) * 1000))
                          for ms in cfg.delay_levels_ms[2:]] or [duration(1000)])))
        return out

    @streams_refusals(svc.TelemetryCommand)
    async def Telemetry(self, request_iterator: AsyncIterator[svc.TelemetryCommand],
                        context: Context
                        ) -> AsyncGenerator[svc.TelemetryCommand, None]:
        authorize(self.broker, context)
        c = self._caller(context)
        self._check_owner(context, c)
        ch = c.channel
        ch.owner = self._owner(context, c)
        outbox: asyncio.Queue[svc.TelemetryCommand | None] = asyncio.Queue(TELEMETRY_OUTBOX)
        ch.outbox = outbox

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.WhichOneof("command") == "settings":
                        if outbox.full():  # it sends and never reads: end its stream
                            log.warning("telemetry of %s closed: %d replies unread",
                                        ch.client_id, outbox.qsize())
                            break
                        ch.settings = cmd.settings
                        outbox.put_nowait(svc.TelemetryCommand(
                            status=status(pb.OK),
                            settings=self._server_settings(ch, cmd.settings, context)))
            except asyncio.CancelledError:
                pass
            finally:
                while outbox.full():
                    outbox.get_nowait()
                outbox.put_nowait(None)
        reader = asyncio.ensure_future(read())
        try:
            while (item := await outbox.get()) is not None:
                yield item
        finally:
            reader.cancel()
            if ch.outbox is outbox:
                ch.outbox = None

    @authenticated(svc.HeartbeatResponse)
    async def Heartbeat(self, request: svc.HeartbeatRequest,
                        context: Context) -> svc.HeartbeatResponse:
        self._caller(context)
        return svc.HeartbeatResponse(status=status(pb.OK))

    @authenticated(svc.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request: svc.NotifyClientTerminationRequest,
                                      context: Context
                                      ) -> svc.NotifyClientTerminationResponse:
        c = self._client(context)
        if c is not None:
            self._check_owner(context, c)
            c.channel.close()
            self.channels.pop(c.client_id, None)
        return svc.NotifyClientTerminationResponse(status=status(pb.OK))

    # ---- routes ---------------------------------------------------------------------
    @authenticated(svc.QueryRouteResponse)
    async def QueryRoute(self, request: svc.QueryRouteRequest,
                         context: Context) -> svc.QueryRouteResponse:
        topic = request.topic.name
        try:
            doc = await route_doc(self.broker, topic)
        except RemotingError as e:
            return svc.QueryRouteResponse(status=status(pb.INTERNAL_SERVER_ERROR, str(e)))
        if doc is None:
            return svc.QueryRouteResponse(status=status(
                pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist: create it first "
                "(ledgermq admin updateTopic)"))
        out = svc.QueryRouteResponse(status=status(pb.OK),
                                     message_queues=message_queues(doc, topic))
        if not out.message_queues:
            out.status.CopyFrom(status(pb.NOT_FOUND, f"topic {topic}: no group has a master "
                                       "serving gRPC now"))
        return out

    @authenticated(svc.QueryAssignmentResponse)
    async def QueryAssignment(self, request: svc.QueryAssignmentRequest,
                              context: Context) -> svc.QueryAssignmentResponse:
        """POP needs no queue ownership: one assignment per group's master, any queue."""
        route = await self.QueryRoute(svc.QueryRouteRequest(topic=request.topic), context)
        if route.status.code != pb.OK:
            return svc.QueryAssignmentResponse(status=route.status)
        out = svc.QueryAssignmentResponse(status=status(pb.OK))
        seen = set()
        for q in route.message_queues:
            if q.broker.name in seen or q.permission not in (pb.READ, pb.READ_WRITE):
                continue
            seen.add(q.broker.name)
            mq = pb.MessageQueue()
            mq.CopyFrom(q)
            mq.id = -1
            out.assignments.add(message_queue=mq)
        return out

    # ---- send -----------------------------------------------------------------------
    @authenticated(svc.SendMessageResponse)
    async def SendMessage(self, request: svc.SendMessageRequest,
                          context: Context) -> svc.SendMessageResponse | bytes:
        """(A message stored is answered already serialized: see encoded.py.)"""
        ch = self._caller(context)
        if len(request.messages) == 1:  # (what every client sends but a batch)
            one = await self._send_one(request.messages[0], ch)
            if isinstance(one, tuple):
                return encoded.sent(*one)
            return svc.SendMessageResponse(status=one.status, entries=(one,))
        if not request.messages:
            return svc.SendMessageResponse(status=status(pb.BAD_REQUEST, "no message to send"))
        entries = [_entry(await self._send_one(m, ch)) for m in request.messages]
        out = svc.SendMessageResponse(entries=entries)
        codes = {e.status.code for e in entries}
        out.status.CopyFrom(entries[0].status if len(codes) == 1 else
                            status(pb.MULTIPLE_RESULTS, "see each entry"))
        return out

    async def _send_one(self, m: pb.Message, ch: CallOf) -> svc.SendResultEntry | Sent:
        """A message stored: (message id, queue offset, transaction id); else the entry
        saying why not."""
        topic = m.topic.name
        try:
            props = properties_of(m)
        except Refused as e:
            return svc.SendResultEntry(status=refused_status(e))
        body = m.body
        if not body:
            return svc.SendResultEntry(status=status(pb.MESSAGE_BODY_EMPTY,
                                                     "the message body is empty"))
        if len(body) > self.broker.store.config.maxMessageSize:
            return svc.SendResultEntry(status=status(
                pb.MESSAGE_BODY_TOO_LARGE, f"the body is {len(body)} B, more than "
                f"maxMessageSize={self.broker.store.config.maxMessageSize}"))
        refused = self._delivery_time_refusal(m)
        if refused is not None:
            return svc.SendResultEntry(status=status(pb.ILLEGAL_DELIVERY_TIME, refused))
        tc = self.broker.topics.get(topic)
        if tc is None:
            return svc.SendResultEntry(status=status(
                pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist on "
                f"{self.broker.config.brokerName}"))
        group = props.get(PROPERTY_MESSAGE_GROUP)
        # a FIFO message group always lands in one queue: its order is that queue's
        qid = (zlib.crc32(group.encode()) if group else next(self._sends)) \
            % tc.writeQueueNums
        sp = m.system_properties
        transactional = sp.message_type == pb.TRANSACTION
        born = sp.born_timestamp
        ext = {"producerGroup": transaction_group(topic), "topic": topic,
               "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": str(qid),
               "sysFlag": str(SYSFLAG_TRANSACTION_PREPARED) if transactional else "0",
               "bornTimestamp": str(born.seconds * 1000 + born.nanos // 1_000_000),
               "flag": "0", "properties": encode_properties(props).decode(),
               "reconsumeTimes": "0"}
        resp = call(self.broker, RemotingCommand(RequestCode.SEND_MESSAGE, ext=ext, body=body,
                                                 language="JAVA"), ch)
        if not isinstance(resp, RemotingCommand):
            resp = await resp
        if resp.code != ResponseCode.SUCCESS:
            code = _SEND_STATUS.get(resp.code, pb.INTERNAL_SERVER_ERROR)
            return svc.SendResultEntry(status=status(code, resp.remark or "send failed"))
        offset = int(resp.ext.get("queueOffset", "0"))
        if not transactional:
            return sp.message_id, offset, ""
        offset_id = (resp.ext.get("msgId") or "").split(",")[0]
        return sp.message_id, offset, str(int(offset_id[16:32], 16))

    def _delivery_time_refusal(self, m: pb.Message) -> str | None:
        """Why a delivery time is refused: further away than the proxy's maxDelayTimeMills
        (RocketMQ's proxy: a day) or the timer's timerMaxDelaySec."""
        sp = m.system_properties
        if not sp.HasField("delivery_timestamp"):
            return None
        at_s = sp.delivery_timestamp.seconds
        config = self.broker.config
        most_ms = min(config.maxDelayTimeMills, config.timerMaxDelaySec * 1000)
        if to_ms(sp.delivery_timestamp) - time.time() * 1000 > most_ms:
            hint = " (it reads as milliseconds put in the seconds field)" \
                if at_s > 10 ** 12 else ""
            return (f"delivery timestamp {at_s} s is more than {most_ms // 1000} s away "
                    f"(maxDelayTimeMills={config.maxDelayTimeMills}, "
                    f"timerMaxDelaySec={config.timerMaxDelaySec}){hint}")
        return None

    @authenticated(svc.EndTransactionResponse)
    async def EndTransaction(self, request: svc.EndTransactionRequest,
                             context: Context) -> svc.EndTransactionResponse:
        ch = self._caller(context)
        if not request.transaction_id.isdigit():
            return svc.EndTransactionResponse(status=status(
                pb.INVALID_TRANSACTION_ID, f"transaction id {request.transaction_id!r} was "
                "not issued by ledgermq"))
        kind = {pb.COMMIT: SYSFLAG_TRANSACTION_COMMIT,
                pb.ROLLBACK: SYSFLAG_TRANSACTION_ROLLBACK}.get(request.resolution, 0)
        resp = call(self.broker, RemotingCommand(RequestCode.END_TRANSACTION, ext={
            "producerGroup": transaction_group(request.topic.name),
            "commitLogOffset": request.transaction_id, "commitOrRollback": str(kind),
            "transactionId": request.message_id,
            "fromTransactionCheck": str(request.source == pb.SOURCE_SERVER_CHECK).lower()},
            language="JAVA"), ch)
        if not isinstance(resp, RemotingCommand):
            resp = await resp
        if resp.code != ResponseCode.SUCCESS:
            return svc.EndTransactionResponse(status=status(pb.INTERNAL_SERVER_ERROR,
                                                            resp.remark or "not ended"))
        return svc.EndTransactionResponse(status=status(pb.OK, resp.remark or "OK"))

    # ---- receive (POP) --------------------------------------------------------------
    def _filter(self, expr: pb.FilterExpression) -> Filter:
        """(tag codes, SQL92 predicate); ValueError for an expression that does not parse."""
        return pop_filter(expr.type == pb.SQL, expr.expression,
                          self.broker.config.enablePropertyFilter)

    @streams_refusals(svc.ReceiveMessageResponse)
    async def ReceiveMessage(self, request: svc.ReceiveMessageRequest,
                             context: Context
                             ) -> AsyncGenerator[svc.ReceiveMessageResponse, None]:
        group, topic = request.group.name, request.message_queue.topic.name
        authorize_consume(self.broker, context, group, topic)
        client = self._caller(context)
        if not self.broker.mode.is_writable:
            yield svc.ReceiveMessageResponse(status=status(
                pb.NOT_FOUND, f"{self.broker.address} is not the master of "
                f"{self.broker.config.brokerName} now: receive from the route's broker"))
            return
        try:
            codes, predicate = self._filter(request.filter_expression)
        except (ValueError, SqlError) as e:
            yield svc.ReceiveMessageResponse(status=status(pb.ILLEGAL_FILTER_EXPRESSION, str(e)))
            return
        pulling = self.broker.consumers.groups.get(group)
        if pulling is not None and pulling.clients:
            yield svc.ReceiveMessageResponse(status=status(pb.PRECONDITION_FAILED, (
                f"consumer group {group} has RocketMQ 4 (remoting) consumers connected: a "
                f"group pulls or pops, not both; use another group name")))
            return
        sg = self.broker.subgroups.for_consumer(group)
        fifo = bool(sg and sg.consumeMessageOrderly)
        invisible = ms_of(request.invisible_duration, DEFAULT_INVISIBLE_MS)
        shortest = self.broker.config.minInvisibleTimeMillsForRecv
        if invisible < shortest:
            raise Refused(Kind.INVISIBLE_TIME, (
                f"the invisibleTime is too small: {invisible} ms, under "
                f"minInvisibleTimeMillsForRecv={shortest} ms"))
        poll_s = min(ms_of(request.long_polling_timeout, DEFAULT_POLL_MS),
                     self.broker.config.grpcClientConsumerMaxLongPollingTimeoutMillis) / 1000
        remaining = context.time_remaining()
        if remaining is not None:  # answer before the client gives up
            poll_s = min(poll_s, max(0.0, remaining - 1.0))
        await self.broker.pop.ready()  # (the ack log replayed off the loop first)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_s
        batch = max(1, min(request.batch_size or 32, 32))
        while True:
            popped = self.broker.pop.pop(group, topic, batch, invisible, fifo, codes,
                                         predicate)
            if popped:
                break
            left = deadline - loop.time()
            if left <= 0:
                yield svc.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND,
                                                               "no new message"))
                return
            await self.broker.pop.wait(group, topic, min(left, POLL_SLICE_S))
        if request.auto_renew:
            self.renewal.track(client.channel, group, (p.handle for p in popped))
        # when the batch left the broker: clients measure delivery latency from it
        yield svc.ReceiveMessageResponse(delivery_timestamp=timestamp(wall_ms()))
        for p in popped:
            out = svc.ReceiveMessageResponse()
            to_grpc_into(out.message, p.message, receipt_handle=p.handle.encode(),
                         attempt=p.attempt, invisible_ms=p.invisible_ms)
            yield out
        yield svc.ReceiveMessageResponse(status=status(pb.OK))

    @answers_refusals(svc.AckMessageResponse)
    async def AckMessage(self, request: svc.AckMessageRequest,
                         context: Context) -> svc.AckMessageResponse | bytes:
        group, topic = request.group.name, request.topic.name
        authorize_consume(self.broker, context, group, topic)
        acks = []
        refused: list[pb.Status | None] = []  # each entry's refusal, or None
        for e in request.entries:
            try:
                acks.append(self.broker.pop.ack(group, e.receipt_handle, topic))
                refused.append(None)
            except Refused as err:
                refused.append(refused_status(err))
        unsafe = await self.broker.pop.log_acks(acks)  # OK only once a failover keeps them
        if unsafe is None and request.entries and all(st is None for st in refused):
            # (the usual answer: every ack held)
            return encoded.acked([(e.message_id, e.receipt_handle) for e in request.entries])
        out = svc.AckMessageResponse()
        for e, st in zip(request.entries, refused):
            out.entries.add(message_id=e.message_id, receipt_handle=e.receipt_handle,
                            status=OK if st is None else st)
        if unsafe is not None:
            for entry in out.entries:
                if entry.status.code == pb.OK:
                    entry.status.CopyFrom(status(pb.HA_NOT_AVAILABLE, unsafe))
        codes = {e.status.code for e in out.entries}
        out.status.CopyFrom(out.entries[0].status if len(codes) == 1 else
                            status(pb.MULTIPLE_RESULTS, "see each entry"))
        return out

    @answers_refusals(svc.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request: svc.ChangeInvisibleDurationRequest,
                                      context: Context
                                      ) -> svc.ChangeInvisibleDurationResponse:
        authorize_consume(self.broker, context, request.group.name, request.topic.name)
        h = self.broker.pop.change_invisible(
            request.group.name, request.receipt_handle,
            ms_of(request.invisible_duration, DEFAULT_INVISIBLE_MS), request.topic.name)
        return svc.ChangeInvisibleDurationResponse(status=status(pb.OK),
                                                   receipt_handle=h.encode())

    @answers_refusals(svc.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
            self, request: svc.ForwardMessageToDeadLetterQueueRequest,
            context: Context) -> svc.ForwardMessageToDeadLetterQueueResponse:
        authorize_consume(self.broker, context, request.group.name, request.topic.name)
        self.broker.pop.dead_letter(request.group.name, request.receipt_handle,
                                    request.topic.name)
        return svc.ForwardMessageToDeadLetterQueueResponse(status=status(pb.OK))
