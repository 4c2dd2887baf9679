"""bench/grpc_floor_broker.py, the floor under RocketMQ 5's Java client: a floor that answered
wrongly would measure the client failing (resending, dropping messages whose digest does not
hold), not a floor. So its sends answer OK with their own message id and a new offset each,
a receive brings 32 well-formed messages then OK, an ack answers each entry OK, and the rest
of the endpoint (routes) is the broker's own."""
import hashlib

import grpc

from bench.rocketmq_sides import GrpcFloorSide
from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc

META = [("x-mq-client-id", "floor-test")]


def test_the_grpc_floor_answers_sends_receives_and_acks_as_the_clients_read_them(tmp_path):
    floor = GrpcFloorSide("proxy", tmp_path)
    try:
        with grpc.insecure_channel(floor.grpc) as channel:
            s = rpc.Stub(channel)
            offsets = []
            for i in range(3):
                m = pb.Message(topic=pb.Resource(name="FloorTopic"), body=b"x", system_properties=
                               pb.SystemProperties(message_id=f"id-{i}", message_type=pb.NORMAL))
                r = s.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=META,
                                  timeout=10)
                assert r.status.code == pb.OK
                assert [(e.status.code, e.message_id) for e in r.entries] == [(pb.OK, f"id-{i}")]
                offsets.append(r.entries[0].offset)
            assert len(set(offsets)) == 3

            received = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
                group=pb.Resource(name="g"), message_queue=pb.MessageQueue(
                    topic=pb.Resource(name="FloorTopic")), batch_size=32),
                metadata=META, timeout=10))
            msgs = [r.message for r in received if r.HasField("message")]
            assert received[-1].status.code == pb.OK and len(msgs) == 32
            for m in msgs:
                assert m.topic.name == "FloorTopic" and m.system_properties.receipt_handle
                assert m.system_properties.body_digest.checksum.lower() == \
                    hashlib.md5(m.body).hexdigest()
            assert len({m.system_properties.message_id for m in msgs}) == 32

            ack = s.AckMessage(svc.AckMessageRequest(
                group=pb.Resource(name="g"), topic=pb.Resource(name="FloorTopic"),
                entries=[svc.AckMessageEntry(message_id=m.system_properties.message_id,
                                             receipt_handle=m.system_properties.receipt_handle)
                         for m in msgs[:3]]), metadata=META, timeout=10)
            assert ack.status.code == pb.OK
            assert [e.status.code for e in ack.entries] == [pb.OK] * 3

            route = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="FloorTopic")),
                                 metadata=META, timeout=10)
            assert route.status.code == pb.TOPIC_NOT_FOUND  # (the broker's own answer)
    finally:
        floor.close()
    assert floor.dev.proc.returncode == 0
