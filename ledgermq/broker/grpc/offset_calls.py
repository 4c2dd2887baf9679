"""The offset calls of RocketMQ 5's MessagingService (PullConsumer-style clients): a
group's committed offset read and written, a queue's offsets by policy or time. Each call
checks the caller's permission on the topic and group it names."""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ...apis import definition_pb2 as pb
from ...apis import service_pb2 as svc
from ...remoting import RequestCode
from ..refusals import Kind, Refused
from .auth import authenticated, authorize, authorize_consume
from .convert import status, to_ms

if TYPE_CHECKING:
    from ...grpcserver import Context
    from ..broker import Broker


class OffsetCalls:
    """Mixed into MessagingService (its `broker`)."""

    broker: Broker

    def _queue_of(self, mq: pb.MessageQueue) -> tuple[str, int]:
        tc = self.broker.topics.for_pull(mq.topic.name)
        if tc is None:
            raise Refused(Kind.TOPIC_NOT_FOUND, f"topic {mq.topic.name} does not exist on "
                          f"{self.broker.config.brokerName}")
        if not 0 <= mq.id < max(tc.readQueueNums, tc.writeQueueNums):
            raise Refused(Kind.BAD_REQUEST, f"queue {mq.id} is not a queue of {mq.topic.name} "
                          f"({tc.readQueueNums} read queues)")
        return mq.topic.name, mq.id

    def _checked_queue(self, request: svc.GetOffsetRequest | svc.QueryOffsetRequest
                       | svc.UpdateOffsetRequest, context: Context,
                       group: bool) -> tuple[str, int]:
        """The request's queue, once the caller may read its topic (and, with `group`,
        act for its group); Refused saying why not."""
        topic = request.message_queue.topic.name
        named = cast("svc.GetOffsetRequest | svc.UpdateOffsetRequest", request)  # with `group`
        if group:
            authorize_consume(self.broker, context, named.group.name, topic)
        else:
            authorize(self.broker, context, RequestCode.GET_MAX_OFFSET, {"topic": topic})
        return self._queue_of(request.message_queue)

    @authenticated(svc.GetOffsetResponse)
    async def GetOffset(self, request: svc.GetOffsetRequest,
                        context: Context) -> svc.GetOffsetResponse:
        q = self._checked_queue(request, context, group=True)
        offset = self.broker.offsets.query(q[0], request.group.name, q[1])
        if offset is None or offset < 0:
            return svc.GetOffsetResponse(status=status(
                pb.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset in "
                f"{q[0]}/{q[1]}"))
        return svc.GetOffsetResponse(status=status(pb.OK), offset=offset)

    @authenticated(svc.QueryOffsetResponse)
    async def QueryOffset(self, request: svc.QueryOffsetRequest,
                          context: Context) -> svc.QueryOffsetResponse:
        q = self._checked_queue(request, context, group=False)
        store = self.broker.store
        if request.query_offset_policy == pb.BEGINNING:
            offset = store.min_offset_in_queue(*q)
        elif request.query_offset_policy == pb.END:
            offset = store.max_offset_in_queue(*q)
        else:
            offset = store.offset_by_time(*q, to_ms(request.timestamp))
        return svc.QueryOffsetResponse(status=status(pb.OK), offset=offset)

    @authenticated(svc.UpdateOffsetResponse)
    async def UpdateOffset(self, request: svc.UpdateOffsetRequest,
                           context: Context) -> svc.UpdateOffsetResponse:
        q = self._checked_queue(request, context, group=True)
        if request.offset < 0:
            return svc.UpdateOffsetResponse(status=status(pb.ILLEGAL_OFFSET,
                                                          f"offset {request.offset} < 0"))
        if not self.broker.mode.is_writable:
            return svc.UpdateOffsetResponse(status=status(
                pb.NOT_FOUND, f"{self.broker.address} is not the master now"))
        self.broker.offsets.commit(q[0], request.group.name, q[1], request.offset)
        self.broker.pop.forget(request.group.name, *q)  # POP starts over from it
        return svc.UpdateOffsetResponse(status=status(pb.OK))
