"""RocketMQ 5's POP over remoting (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
BATCH_ACK_MESSAGE): what RocketMQ's own proxy in cluster mode sends a broker for its gRPC
clients' receive, ack and invisibility calls, served by the same POP service as
ledgermq's gRPC endpoint (pop/service.py).

RocketMQ names a delivery by its "extra info", which the client builds from the pop
answer's header and gives back on ack (fields split by a space):

    ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId queueOffset
    [commitLogOffset: the proxy adds it to its receipt handles]

ledgermq's delivery names the same things (pop/bookkeeping.Handle): the pop time is its
stamp, the retry flag says whether the message came from the group's retry topic. The
answer's header carries, per (retry flag, queue) in the body, the first offset
(`startOffsetInfo`: "flag queueId offset", entries split by ";") and every offset in body
order (`msgOffsetInfo`: "flag queueId o1,o2,..."); for a FIFO group, each message's
earlier deliveries (`orderCountInfo`: "flag qo<queueId>%<offset> count")."""
from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, cast

from ...remoting import Connection, RemotingCommand, ReplyWhen, RequestCode, ResponseCode
from ...remoting.codes import RETRY_PREFIX
from ...remoting.transport import Handler
from ..json_bodies import json_object
from ..pop.bookkeeping import Handle, Key
from ..pop.filters import pop_filter
from ..pop.service import Popped
from ..refusals import Kind, Refused

if TYPE_CHECKING:
    from ..broker import Broker

MAX_POP = 32  # messages in one answer, at most (RocketMQ's proxy asks for up to 32)
POLL_SLICE_S = 1.0  # a long poll re-checks the queues at least this often
NORMAL, RETRY = "0", "1"  # RocketMQ's retry flags (its "2" names a topic form not used here)
MAX_BATCH_ACKS = 1024  # entries of one BATCH_ACK_MESSAGE, at most
MAX_BITSET_BYTES = 1024  # one entry's bit set: 8,192 offsets (a pop answer holds 32)
NOT_FIFO_REVIVE_QID = "0"


def retry_flag(topic: str) -> str:
    return NORMAL if not topic.startswith(RETRY_PREFIX) else RETRY


def _info(entries: dict[tuple[str, int], list[int]], first_only: bool) -> str:
    return ";".join(f"{flag} {qid} {offs[0] if first_only else ','.join(map(str, offs))}"
                    for (flag, qid), offs in entries.items())


def pop_header(popped: list[Popped], stamp: int, invisible_ms: int, fifo: bool) -> dict[str, str]:
    """The pop answer's header for `popped`, in body order."""
    offsets: dict[tuple[str, int], list[int]] = {}
    counts = []
    queue: tuple[str, int] | None = None
    for p in popped:
        h = p.handle
        if queue is None or h.queue_id != queue[1] or h.topic != queue[0]:
            # a pop hands a queue's messages out together: its list is looked up once
            queue, flag = (h.topic, h.queue_id), retry_flag(h.topic)
            listed = offsets.setdefault((flag, h.queue_id), [])
        listed.append(h.offset)
        if fifo:
            counts.append(f"{flag} qo{h.queue_id}%{h.offset} {p.attempt - 1}")
    return {"popTime": str(stamp), "invisibleTime": str(invisible_ms),
            "reviveQid": NOT_FIFO_REVIVE_QID, "restNum": "0",
            "startOffsetInfo": _info(offsets, True), "msgOffsetInfo": _info(offsets, False),
            "orderCountInfo": ";".join(counts)}


def delivery(broker: str, group: str, topic: str, extra_info: str, offset: int) -> Handle:
    """The delivery an ack's extra info names (Refused when it is not one of ours)."""
    parts = extra_info.split(" ")
    try:
        if len(parts) < 7:
            raise ValueError
        pop_time, invisible_ms, flag, name, qid = (int(parts[1]), int(parts[2]), parts[4],
                                                   parts[5], int(parts[6]))
    except ValueError:
        raise Refused(Kind.RECEIPT_HANDLE, f"extraInfo {extra_info[:120]!r} is not a receipt "
                      "of a pop") from None
    if name != broker:
        raise Refused(Kind.RECEIPT_HANDLE, f"extraInfo of broker {name[:64]}, not of {broker}")
    queue_topic = topic if flag == NORMAL else RETRY_PREFIX + group
    return Handle(name, queue_topic, qid, offset, pop_time, invisible_ms)


def base_topic(group: str, topic: str) -> str:
    """The topic a group reads, from the topic of an ack: RocketMQ's proxy acks a retried
    message under its retry topic (%RETRY%<group>_<topic>, or +<topic>)."""
    if not topic.startswith(RETRY_PREFIX):
        return topic  # (the usual ack: no prefixes to build)
    for sep in ("_", "+"):
        prefix = f"{RETRY_PREFIX}{group}{sep}"
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return topic


def batch_acked_offsets(start: int, bits: str) -> list[int]:
    """The offsets a BatchAck's bit set names (java.util.BitSet.toByteArray, base64:
    bit i of byte j is offset start + 8j + i)."""
    try:
        raw = base64.b64decode(bits, validate=True)
    except ValueError:
        raise Refused(Kind.BAD_REQUEST, "a batch ack's bit set is not base64") from None
    if len(raw) > MAX_BITSET_BYTES:
        raise Refused(Kind.BAD_REQUEST, f"a batch ack's bit set of {len(raw)} bytes: at most "
                      f"{MAX_BITSET_BYTES}")
    return [start + 8 * j + i for j, byte in enumerate(raw) for i in range(8)
            if byte >> i & 1]


class PopProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.POP_MESSAGE: self.pop, RequestCode.ACK_MESSAGE: self.ack,
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible,
                RequestCode.BATCH_ACK_MESSAGE: self.batch_ack}

    async def pop(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext, b = cmd.ext, self.broker
        group, topic = ext["consumerGroup"], ext["topic"]
        if not b.mode.is_writable:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, (
                f"{b.address} is not the master of {b.config.brokerName} now: pop from the "
                "route's master"))
        pulling = b.consumers.groups.get(group)
        if pulling is not None and pulling.clients:
            return cmd.response(ResponseCode.SYSTEM_ERROR, (
                f"consumer group {group[:128]} has remoting pull consumers connected: a group "
                "pulls or pops, not both"))
        sg = b.subgroups.for_consumer(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group[:128]}] does not exist")
        # (a filter that does not parse is a bad request: ValueError, answered by the broker)
        codes, predicate = pop_filter((ext.get("expType") or "TAG").upper() == "SQL92",
                                      ext.get("exp") or "*", b.config.enablePropertyFilter)
        max_count = max(1, min(int(ext.get("maxMsgNums") or 1), MAX_POP))
        invisible_ms = int(ext["invisibleTime"])
        fifo = (ext.get("order") or "").lower() == "true" or sg.consumeMessageOrderly
        queue_id = int(ext.get("queueId") or -1)
        poll_s = max(0, min(int(ext.get("pollTime") or 0),
                            b.config.grpcClientConsumerMaxLongPollingTimeoutMillis)) / 1000
        await b.pop.ready()  # (the ack log replayed off the loop first)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_s
        while True:
            popped = b.pop.pop(group, topic, max_count, invisible_ms, fifo, codes, predicate,
                               queue_id)
            if popped:
                break
            left = deadline - loop.time()
            if left <= 0:
                return cmd.response(ResponseCode.POLLING_TIMEOUT, "no new message")
            await b.pop.wait(group, topic, min(left, POLL_SLICE_S))
        stamp = popped[0].handle.stamp
        return cmd.response(ResponseCode.SUCCESS, None,
                            pop_header(popped, stamp, invisible_ms, fifo),
                            [p.raw for p in popped])

    def _acked(self, group: str, topic: str, handle: Handle) -> tuple[Key, int]:
        return self.broker.pop.ack(group, handle, base_topic(group, topic))

    def _logged(self, cmd: RemotingCommand, acks: list[tuple[Key, int]]) -> ReplyWhen:
        """Answered once the acks' write holds (a failover keeps them); no task of its
        own: a busy proxy sends an ack a message."""
        def answer(unsafe: object) -> RemotingCommand:
            if unsafe is not None:
                return cmd.response(ResponseCode.FLUSH_SLAVE_TIMEOUT, str(unsafe))
            return cmd.response(ResponseCode.SUCCESS)
        return ReplyWhen(self.broker.pop.log_acks(acks), answer)

    def ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | ReplyWhen:
        ext = cmd.ext
        group, topic = ext["consumerGroup"], ext["topic"]
        h = delivery(self.broker.config.brokerName, group, topic, ext["extraInfo"],
                     int(ext["offset"]))
        try:
            acked = self._acked(group, topic, h)
        except Refused as e:
            return cmd.response(ResponseCode.NO_MESSAGE, str(e))
        return self._logged(cmd, [acked])

    def batch_ack(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | ReplyWhen:
        """Acks of many deliveries in one request: {brokerName, acks: [{c: group, t: topic,
        r: retry flag, so: start offset, q: queue, pt: pop time, it: invisible time, b: the
        acked offsets as a bit set}]}, logged in one write."""
        body = json_object(cast(bytes, cmd.body), "the batch ack")
        broker = self.broker.config.brokerName
        entries = body.get("acks") or []
        if len(entries) > MAX_BATCH_ACKS:
            raise Refused(Kind.BAD_REQUEST, f"{len(entries)} entries in a batch ack: at most "
                          f"{MAX_BATCH_ACKS}")
        acks, refused = [], []
        for a in entries:
            group, topic, flag = str(a["c"]), str(a["t"]), str(a.get("r", NORMAL))
            queue_topic = topic if flag == NORMAL else RETRY_PREFIX + group
            for offset in batch_acked_offsets(int(a["so"]), str(a.get("b") or "")):
                h = Handle(broker, queue_topic, int(a["q"]), offset, int(a["pt"]), int(a["it"]))
                try:
                    acks.append(self._acked(group, topic, h))
                except Refused as e:
                    refused.append(str(e))
        if refused and not acks:
            return cmd.response(ResponseCode.NO_MESSAGE, refused[0])
        return self._logged(cmd, acks)

    def change_invisible(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        group, topic = ext["consumerGroup"], ext["topic"]
        h = delivery(self.broker.config.brokerName, group, topic, ext["extraInfo"],
                     int(ext["offset"]))
        try:
            new = self.broker.pop.change_invisible(group, h, int(ext["invisibleTime"]),
                                                   base_topic(group, topic))
        except Refused as e:
            if e.kind is not Kind.RECEIPT_HANDLE:
                raise
            return cmd.response(ResponseCode.NO_MESSAGE, str(e))
        return cmd.response(ResponseCode.SUCCESS, None, {
            "popTime": str(new.stamp), "invisibleTime": str(new.invisible_ms),
            "reviveQid": NOT_FIFO_REVIVE_QID})
