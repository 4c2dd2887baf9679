"""The floor under RocketMQ 5's Java client on ledgermq's gRPC endpoint (#33): `ledgermq dev`
with the three calls a benchmark repeats answered at once from canned answers, so that what
the Java client reaches against it is what any server on ledgermq's gRPC server could reach
on this machine with that client. Everything else (routes, heartbeats, the telemetry
stream's settings, topic and group admin) is the broker's own.

- SendMessage: stored nowhere; answered OK with the message's id and a counter as offset.
- ReceiveMessage: 32 canned messages (real digests, a receipt handle each), never "no new
  message"; a consumer stops when it has counted what it expected.
- AckMessage: every entry OK, nothing looked up.
No authentication, no store, no POP bookkeeping: only the HTTP/2 and gRPC work a call needs,
its protobuf decode and the answer's encode.

    python bench/grpc_floor_broker.py dev -c CONF --data DIR ...   # the `ledgermq dev` CLI
`rocketmq_bench.py --layouts proxy` starts and stops it (GrpcFloorSide, system "grpc-floor").
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any, AsyncIterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledgermq.apis import definition_pb2 as pb  # noqa: E402
from ledgermq.apis import service_pb2 as svc  # noqa: E402
from ledgermq.broker.grpc import encoded  # noqa: E402
from ledgermq.broker.grpc.convert import status, to_grpc  # noqa: E402
from ledgermq.broker.grpc.messaging import MessagingService  # noqa: E402
from ledgermq.wire.message import Message, decode_message, encode_message  # noqa: E402

CANNED = 32  # messages a receive answers with (the clients' batch size)


def canned_receive(topic: str) -> list[svc.ReceiveMessageResponse]:
    """A receive's whole answer: the delivery time, 32 messages, then OK."""
    out = [svc.ReceiveMessageResponse(delivery_timestamp={"seconds": 1})]
    for i in range(CANNED):
        stored = decode_message(encode_message(
            Message(topic, b"x" * 100, properties={"UNIQ_KEY": f"01FLOOR{i:025d}"}),
            queue_offset=i, phys_offset=200 * i, store_timestamp=1))
        out.append(svc.ReceiveMessageResponse(message=to_grpc(
            stored, receipt_handle=f"floor-handle-{i}", attempt=1, invisible_ms=30_000)))
    out.append(svc.ReceiveMessageResponse(status=status(pb.OK)))
    return out


def answer_canned() -> None:
    offsets = itertools.count()
    receives: dict[str, list[svc.ReceiveMessageResponse]] = {}

    async def send(self: Any, request: svc.SendMessageRequest, context: Any) -> bytes:
        m = request.messages[0]
        return encoded.sent(m.system_properties.message_id, next(offsets))

    async def receive(self: Any, request: svc.ReceiveMessageRequest,
                      context: Any) -> AsyncIterator[svc.ReceiveMessageResponse]:
        topic = request.message_queue.topic.name
        answer = receives.get(topic) or receives.setdefault(topic, canned_receive(topic))
        for r in answer:
            yield r

    async def ack(self: Any, request: svc.AckMessageRequest, context: Any) -> bytes:
        return encoded.acked([(e.message_id, e.receipt_handle) for e in request.entries])

    MessagingService.SendMessage = send  # type: ignore[method-assign]
    MessagingService.ReceiveMessage = receive  # type: ignore[method-assign, assignment]
    MessagingService.AckMessage = ack  # type: ignore[method-assign]


if __name__ == "__main__":
    answer_canned()
    from ledgermq.cli import run
    run()
