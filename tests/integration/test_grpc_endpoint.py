"""The broker's gRPC endpoint spoken to directly (our generated stubs, no SDK): each bad
request gets the API's status code and a reason a person can act on, and the broker keeps
serving."""
import asyncio
import ssl
import time
import uuid

import grpc
import pytest

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import service_pb2 as svc
from ledgermq.apis import rpc
from ledgermq.client.admin import Admin

from ..dev_process import DevProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = DevProcess(tmp_path_factory.mktemp("grpc"), {
        "grpcServerPort": "0", "minInvisibleTimeMillsForRecv": "1000"}).start()

    async def topic():
        async with Admin(d.namesrv) as a:
            await a.update_topic("GrpcTopic", read_queues=2, write_queues=2)
    try:  # (a setup that fails must not leave the broker running either)
        asyncio.run(topic())
        yield d
    finally:
        d.stop()


def stub(d, client_id="test-client"):
    channel = grpc.insecure_channel(d.ready["grpc"])
    meta = [("x-mq-client-id", client_id)] if client_id else []
    return rpc.Stub(channel), meta


def message(topic="GrpcTopic", body=b"x", **sysprops):
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex, message_type=pb.NORMAL,
                             **sysprops)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=body)


def send(d, *msgs, client_id="test-client"):
    s, meta = stub(d, client_id)
    return s.SendMessage(svc.SendMessageRequest(messages=list(msgs)), metadata=meta,
                         timeout=10)


def test_route_of_a_topic_lists_its_queues_with_this_brokers_grpc_endpoint(broker):
    s, meta = stub(broker)
    r = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="GrpcTopic")),
                     metadata=meta, timeout=10)
    assert r.status.code == pb.OK
    assert [(q.id, q.permission) for q in r.message_queues] == [(0, pb.READ_WRITE),
                                                                (1, pb.READ_WRITE)]
    addr = r.message_queues[0].broker.endpoints.addresses[0]
    assert f"{addr.host}:{addr.port}" == broker.ready["grpc"]
    missing = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")),
                           metadata=meta, timeout=10)
    assert missing.status.code == pb.TOPIC_NOT_FOUND and "updateTopic" in missing.status.message


def test_bad_sends_get_the_apis_codes_and_reasons(broker):
    cases = [
        (message(topic="NoSuchTopic"), pb.TOPIC_NOT_FOUND, "does not exist"),
        (message(body=b""), pb.MESSAGE_BODY_EMPTY, "empty"),
        (message(body=b"x" * (4 * 1024 * 1024 + 1)), pb.MESSAGE_BODY_TOO_LARGE, "maxMessageSize"),
        (message(tag="a|b"), pb.ILLEGAL_MESSAGE_TAG, "'|'"),
        (message(keys=["has space"]), pb.ILLEGAL_MESSAGE_KEY, "space"),
        (message(delivery_timestamp={"seconds": 1_700_000_000_000}), pb.ILLEGAL_DELIVERY_TIME,
         "milliseconds"),
    ]
    for msg, code, reason in cases:
        r = send(broker, msg)
        assert (r.status.code, reason in r.status.message) == (code, True), r.status
    sys_key = message()
    sys_key.user_properties["UNIQ_KEY"] = "mine"
    r = send(broker, sys_key)
    assert r.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert send(broker, message(), client_id=None).status.code == pb.CLIENT_ID_REQUIRED
    ok = send(broker, message(body=b"fine"))  # and the broker still serves
    assert ok.status.code == pb.OK and ok.entries[0].offset >= 0


def with_properties(n: int = 0, size: int = 0, **sysprops) -> pb.Message:
    m = message("GrpcLimits", **sysprops)
    for i in range(n):
        m.user_properties[f"k{i}"] = "v"
    if size:
        m.user_properties["big"] = "x" * (size - 3)
    return m


def test_rocketmqs_proxy_limits_hold_at_their_edges(broker):
    """What RocketMQ's proxy allows (and its e2e suite checks): a 4 MiB body with 16 KiB of
    user properties (the body alone counts against maxMessageSize), 128 properties, 16 KiB
    of properties, tag and keys; one byte or one property more, a control character, a
    64-byte message group or a delivery time past a day is refused with the API's code."""
    day_after = {"seconds": int(time.time()) + 24 * 3600 + 60}

    async def topic():  # (its 4 MiB message stays out of the other tests' receives)
        async with Admin(broker.namesrv) as a:
            await a.update_topic("GrpcLimits", read_queues=1, write_queues=1)
    asyncio.run(topic())
    accepted = [
        with_properties(size=16 * 1024, body=b"b" * (4 * 1024 * 1024)),
        with_properties(128),
        with_properties(size=8 * 1024, tag="t" * (4 * 1024), keys=["k" * (4 * 1024)]),
        message("GrpcLimits", message_group="g" * 63),
    ]
    for msg in accepted:
        r = send(broker, msg)
        assert r.status.code == pb.OK, r.status
    refused = [
        (with_properties(129), pb.MESSAGE_PROPERTIES_TOO_LARGE, "at most 128"),
        (with_properties(size=16 * 1024 + 1), pb.MESSAGE_PROPERTIES_TOO_LARGE, "at most 16384"),
        (with_properties(size=16 * 1024, tag="t"), pb.MESSAGE_PROPERTIES_TOO_LARGE, "16385 B"),
        (message(tag="tag\x01"), pb.ILLEGAL_MESSAGE_TAG, "control character"),
        (message(keys=["key\x7f"]), pb.ILLEGAL_MESSAGE_KEY, "control character"),
        (message(message_group="g" * 64), pb.ILLEGAL_MESSAGE_GROUP, "64 B"),
        (message(delivery_timestamp=day_after), pb.ILLEGAL_DELIVERY_TIME, "maxDelayTimeMills"),
    ]
    ctrl = message()
    ctrl.user_properties["k"] = "line\nbreak"
    refused.append((ctrl, pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "control character"))
    for msg, code, reason in refused:
        r = send(broker, msg)
        assert (r.status.code, reason in r.status.message) == (code, True), r.status


def test_bad_acks_and_receives_get_the_apis_codes(broker):
    s, meta = stub(broker)
    group, topic = pb.Resource(name="GrpcGroup"), pb.Resource(name="GrpcTopic")
    r = s.AckMessage(svc.AckMessageRequest(group=group, topic=topic, entries=[
        svc.AckMessageEntry(message_id="m", receipt_handle="not a handle")]),
        metadata=meta, timeout=10)
    assert r.status.code == pb.INVALID_RECEIPT_HANDLE and "not issued by" in r.status.message
    # (as RocketMQ's proxy words them, which RocketMQ's e2e suite matches)
    assert r.status.message.startswith("INVALID_RECEIPT_HANDLE: ")
    r = s.ChangeInvisibleDuration(svc.ChangeInvisibleDurationRequest(
        group=group, topic=topic, receipt_handle="L1 broker-a GrpcTopic 0 0 1 1000",
        invisible_duration={"seconds": 60}), metadata=meta, timeout=10)
    assert r.status.code == pb.INVALID_RECEIPT_HANDLE  # never handed out: nothing out
    recv = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
        group=group, message_queue=pb.MessageQueue(topic=topic), batch_size=1,
        invisible_duration={"seconds": 100_000}, long_polling_timeout={"seconds": 1}),
        metadata=meta, timeout=10))
    assert [x.status.code for x in recv] == [pb.ILLEGAL_INVISIBLE_TIME]
    assert "the invisibleTime is too large" in recv[0].status.message
    recv = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
        group=group, message_queue=pb.MessageQueue(topic=topic), batch_size=1,
        invisible_duration={"nanos": 500_000_000}, long_polling_timeout={"seconds": 1}),
        metadata=meta, timeout=10))  # (RocketMQ's proxy: at least 10 s; 1 s here)
    assert [x.status.code for x in recv] == [pb.ILLEGAL_INVISIBLE_TIME]
    assert "too small" in recv[0].status.message and \
        "minInvisibleTimeMillsForRecv=1000" in recv[0].status.message
    recv = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
        group=group, message_queue=pb.MessageQueue(topic=topic), batch_size=1,
        filter_expression=pb.FilterExpression(type=pb.SQL, expression="a >"),
        long_polling_timeout={"seconds": 1}), metadata=meta, timeout=10))
    assert [x.status.code for x in recv] == [pb.ILLEGAL_FILTER_EXPRESSION]
    recv = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
        group=group, message_queue=pb.MessageQueue(topic=pb.Resource(name="NoSuchTopic")),
        batch_size=1, long_polling_timeout={"seconds": 1}), metadata=meta, timeout=10))
    assert [x.status.code for x in recv] == [pb.TOPIC_NOT_FOUND]


def test_a_receive_with_nothing_to_get_waits_its_polling_time_then_says_so(broker):
    s, meta = stub(broker)
    start = time.monotonic()
    recv = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
        group=pb.Resource(name="EmptyGroup"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="GrpcTopic")), batch_size=1,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="NoSuchTag"),
        long_polling_timeout={"seconds": 2}), metadata=meta, timeout=10))
    assert [x.status.code for x in recv] == [pb.MESSAGE_NOT_FOUND]
    assert 2.0 - 0.1 <= time.monotonic() - start < 5.0


def test_a_group_consumes_by_one_model(broker):
    """A group receiving by POP cannot pull at the same time, and a group with remoting
    consumers connected cannot receive by POP: each is told why."""
    from ledgermq import PullConsumer, PushConsumer
    from ledgermq.client.instance import MQClientError

    s, meta = stub(broker)
    recv = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
        group=pb.Resource(name="PopGroup"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="GrpcTopic")), batch_size=1,
        long_polling_timeout={"seconds": 1}), metadata=meta, timeout=10))
    assert recv[-1].status.code in (pb.OK, pb.MESSAGE_NOT_FOUND)

    async def pull_and_push():
        async with PullConsumer("PopGroup", broker.namesrv) as c:
            q = (await c.fetch_queues("GrpcTopic"))[0]
            with pytest.raises(MQClientError) as e:
                await c.pull(q, 0, 1)
            assert "consumes by POP" in str(e.value)
        push = PushConsumer("RemotingGroup", broker.namesrv, pull_suspend_ms=300)
        push.subscribe("GrpcTopic")
        push.register_listener(lambda msgs: None)
        await push.start()
        try:
            return list(s.ReceiveMessage(svc.ReceiveMessageRequest(
                group=pb.Resource(name="RemotingGroup"),
                message_queue=pb.MessageQueue(topic=pb.Resource(name="GrpcTopic")),
                batch_size=1, long_polling_timeout={"seconds": 1}), metadata=meta, timeout=10))
        finally:
            await push.shutdown()
    refused = asyncio.run(pull_and_push())
    assert [r.status.code for r in refused] == [pb.PRECONDITION_FAILED]
    assert "remoting" in refused[0].status.message


def test_offsets_can_be_read_queried_and_set(broker):
    s, meta = stub(broker)
    mq = pb.MessageQueue(topic=pb.Resource(name="GrpcTopic"), id=0)
    group = pb.Resource(name="OffsetGroup")
    for _ in range(4):
        assert send(broker, message(body=b"o")).status.code == pb.OK
    end = s.QueryOffset(svc.QueryOffsetRequest(message_queue=mq, query_offset_policy=pb.END),
                        metadata=meta, timeout=10)
    begin = s.QueryOffset(svc.QueryOffsetRequest(message_queue=mq,
                                                 query_offset_policy=pb.BEGINNING),
                          metadata=meta, timeout=10)
    assert begin.offset == 0 and end.offset >= 1
    got = s.GetOffset(svc.GetOffsetRequest(group=group, message_queue=mq), metadata=meta,
                      timeout=10)
    assert got.status.code == pb.OFFSET_NOT_FOUND
    assert s.UpdateOffset(svc.UpdateOffsetRequest(group=group, message_queue=mq,
                                                  offset=end.offset), metadata=meta,
                          timeout=10).status.code == pb.OK
    got = s.GetOffset(svc.GetOffsetRequest(group=group, message_queue=mq), metadata=meta,
                      timeout=10)
    assert (got.status.code, got.offset) == (pb.OK, end.offset)
    bad = s.UpdateOffset(svc.UpdateOffsetRequest(group=group, message_queue=pb.MessageQueue(
        topic=pb.Resource(name="GrpcTopic"), id=99), offset=1), metadata=meta, timeout=10)
    assert bad.status.code == pb.BAD_REQUEST and "queue 99" in bad.status.message


def test_consumers_of_one_group_never_hold_the_same_message(broker):
    """Two receivers of one group, in turns while nothing is acked: each message goes to
    exactly one of them, and acking all leaves nothing for the group."""
    s, meta = stub(broker)
    for i in range(40):
        assert send(broker, message(topic="GrpcTopic", body=b"share-%d" % i)).status.code == pb.OK
    group, topic = pb.Resource(name="ShareGroup"), pb.Resource(name="GrpcTopic")

    def receive(n):
        out = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
            group=group, message_queue=pb.MessageQueue(topic=topic), batch_size=n,
            invisible_duration={"seconds": 60}, long_polling_timeout={"seconds": 1}),
            metadata=meta, timeout=10))
        return [r.message for r in out if r.HasField("message")]
    held: dict[str, list] = {"a": [], "b": []}
    for turn in range(200):
        got = receive(7)
        if not got:
            break
        held["ab"[turn % 2]] += got
    bodies = [m.body for side in held.values() for m in side]
    mine = [b for b in bodies if b.startswith(b"share-")]
    assert sorted(mine) == sorted(b"share-%d" % i for i in range(40))  # each exactly once
    assert held["a"] and held["b"]
    for side in held.values():
        r = s.AckMessage(svc.AckMessageRequest(group=group, topic=topic, entries=[
            svc.AckMessageEntry(message_id=m.system_properties.message_id,
                                receipt_handle=m.system_properties.receipt_handle)
            for m in side]), metadata=meta, timeout=10)
        assert r.status.code == pb.OK, r.status
    assert receive(32) == []


def test_an_ack_of_a_held_and_a_bad_handle_answers_each(broker):
    """One ack, two entries: the one held is acked (OK), the other refused; the call says
    MULTIPLE_RESULTS, as RocketMQ's proxy does."""
    s, meta = stub(broker)
    assert send(broker, message(body=b"mixed-ack")).status.code == pb.OK
    group, topic = pb.Resource(name="MixedAckGroup"), pb.Resource(name="GrpcTopic")
    held = None
    for _ in range(50):  # (other tests' messages on the topic come too, in any order)
        got = [r.message for r in s.ReceiveMessage(svc.ReceiveMessageRequest(
            group=group, message_queue=pb.MessageQueue(topic=topic), batch_size=32,
            invisible_duration={"seconds": 60}, long_polling_timeout={"seconds": 1}),
            metadata=meta, timeout=10) if r.HasField("message")]
        held = next((m for m in got if m.body == b"mixed-ack"), None)
        if held is not None or not got:
            break
    assert held is not None, "the message sent was not received"
    r = s.AckMessage(svc.AckMessageRequest(group=group, topic=topic, entries=[
        svc.AckMessageEntry(message_id=held.system_properties.message_id,
                            receipt_handle=held.system_properties.receipt_handle),
        svc.AckMessageEntry(message_id="m", receipt_handle="not a handle")]),
        metadata=meta, timeout=10)
    assert r.status.code == pb.MULTIPLE_RESULTS
    assert [(e.message_id, e.status.code) for e in r.entries] == [
        (held.system_properties.message_id, pb.OK), ("m", pb.INVALID_RECEIPT_HANDLE)]


def test_one_port_takes_tls_and_plaintext_as_rocketmqs_proxy_does(broker):
    """RocketMQ 5's clients default to TLS (Java's enableSsl(true); Go's always) and the
    proxy accepts them on its one port with a self-signed certificate (tlsTestModeEnable);
    a broker.conf without TLS settings does the same, beside plaintext."""
    host, port = broker.ready["grpc"].rsplit(":", 1)
    cert = ssl.get_server_certificate((host, int(port)))  # made at the broker's start
    assert "BEGIN CERTIFICATE" in cert
    creds = grpc.ssl_channel_credentials(root_certificates=cert.encode())
    channel = grpc.secure_channel(broker.ready["grpc"], creds,
                                  options=[("grpc.ssl_target_name_override", "localhost")])
    r = rpc.Stub(channel).SendMessage(svc.SendMessageRequest(messages=[message(body=b"tls")]),
                                      metadata=[("x-mq-client-id", "tls-client")], timeout=10)
    assert r.status.code == pb.OK, r.status.message
    assert send(broker, message(body=b"plain")).status.code == pb.OK  # the same port


def test_auto_renewed_deliveries_stay_invisible_and_their_first_handle_acks(broker):
    """A PushConsumer's receive asks for auto_renew (and names no invisible duration): its
    messages must not go out again while it consumes, however long, and the handle it got
    is the one it acks with. Here it asks for 1 s: a plain receive would get it again."""
    s, meta = stub(broker)
    assert send(broker, message(topic="GrpcTopic", body=b"renew-me")).status.code == pb.OK
    group, topic = pb.Resource(name="RenewGroup"), pb.Resource(name="GrpcTopic")

    def receive(auto_renew, poll_s):
        out = list(s.ReceiveMessage(svc.ReceiveMessageRequest(
            group=group, message_queue=pb.MessageQueue(topic=topic), batch_size=32,
            invisible_duration={"seconds": 1}, auto_renew=auto_renew,
            long_polling_timeout={"seconds": poll_s}), metadata=meta, timeout=poll_s + 5))
        return [r.message for r in out if r.HasField("message")]
    held = [m for m in receive(True, 1) if m.body == b"renew-me"]
    assert len(held) == 1
    assert [m.body for m in receive(False, 4) if m.body == b"renew-me"] == []  # past 1 s
    r = s.AckMessage(svc.AckMessageRequest(group=group, topic=topic, entries=[
        svc.AckMessageEntry(message_id=held[0].system_properties.message_id,
                            receipt_handle=held[0].system_properties.receipt_handle)]),
        metadata=meta, timeout=10)
    assert r.status.code == pb.OK, r.status
