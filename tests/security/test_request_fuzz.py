"""Structured fuzzing of every request a broker serves (#31): well-formed frames of each
request code the broker serves, with header fields it reads set to hostile values
(negative, huge, non-numeric, unicode, very long) and hostile bodies; and RocketMQ 5
gRPC calls built from protobuf messages with arbitrary field values. Against a real
`ledgermq dev`, the properties checked are what a user sees: every request is answered
(no connection dropped, no UNKNOWN gRPC status from an exception), no handler fails with
a traceback in the broker's log, and the broker still takes and serves a message after.

`make test` runs FUZZ_EXAMPLES=150 of each; `make fuzz` runs many more."""
import asyncio
import json
import os
import uuid

import grpc
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ledgermq import Message, Producer, PullConsumer, PullStatus
from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from ledgermq.broker.access.rules import RULES
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode

from ..dev_process import DevProcess

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# every header field a broker handler reads
FIELDS = ["topic", "b", "consumerGroup", "group", "producerGroup", "queueId", "queueOffset",
          "offset", "commitLogOffset", "commitOffset", "maxMsgNums", "sysFlag",
          "suspendTimeoutMillis", "subscription", "expressionType", "subVersion", "key",
          "maxNum", "beginTimestamp", "endTimestamp", "timestamp", "delayLevel",
          "originMsgId", "originTopic", "maxReconsumeTimes", "properties", "bornTimestamp",
          "flag", "reconsumeTimes", "defaultTopic", "defaultTopicQueueNums", "readQueueNums",
          "writeQueueNums", "perm", "topicFilterType", "topicSysFlag", "order",
          "commitOrRollback", "tranStateTableOffset", "transactionId", "msgId", "batch",
          "isForce", "clientId", "fromTransactionCheck"]
HOSTILE_TEXT = st.one_of(
    st.sampled_from(["", "-1", "0", "1", "2147483648", "-9223372036854775809",
                     "99999999999999999999999", "1e9", "NaN", "true", "%RETRY%x", "TBW102",
                     "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "a\x01b\x02",
                     "\x00", "x" * 5000, "Topic", "g"]),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70).map(str),
    st.text(max_size=40))
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["consumerDataSet", "producerDataSet", "groupName", "clientID",
                         "subscriptionDataSet", "topic", "subString", "expressionType",
                         "consumerGroup", "clientId", "mqSet", "queueId", "brokerName",
                         "group", "subscriptionData", "messageModel"]), inner, max_size=5),
    max_leaves=12)
BODIES = st.one_of(st.none(), st.binary(max_size=300),
                   JSONISH.map(lambda d: json.dumps(d).encode()))


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    d = DevProcess(tmp_path_factory.mktemp("fuzz"), {"grpcServerPort": "0"}).start()
    yield d
    d.stop()
    log = (d.data / "dev.log").read_text()
    assert "handler failed" not in log and "Traceback" not in log, log[-4000:]


def served_codes() -> list[int]:
    """Every code a broker answers (the ACL table covers them all, see test_acl_table)."""
    return sorted(int(c) for c in RULES if c not in (RequestCode.PEER_AUTH,))


@FUZZ
@given(code=st.sampled_from(served_codes()),
       ext=st.dictionaries(st.sampled_from(FIELDS), HOSTILE_TEXT, max_size=10),
       body=BODIES)
def test_every_request_code_with_hostile_fields_is_answered(target, code, ext, body):
    async def ask():
        client = RemotingClient()
        try:
            return await client.invoke(target.broker, RemotingCommand(
                code, ext=ext, body=body or b""), 10)
        finally:
            await client.close()
    r = asyncio.run(ask())
    assert r.is_response


def resource(name):
    return pb.Resource(name=name)


NAMES = st.sampled_from(["", "Topic", "%RETRY%g", "RMQ_SYS_TRANS_HALF_TOPIC", "g", "x" * 300,
                         "bad name!", "\x00"])
DURATIONS = st.builds(lambda s, n: {"seconds": s, "nanos": n},
                      st.integers(-(2 ** 40), 2 ** 40), st.integers(-999_999_999, 999_999_999))
MESSAGES = st.builds(
    lambda topic, body, kind, tag, keys, group, props: pb.Message(
        topic=resource(topic), body=body, user_properties=props,
        system_properties=pb.SystemProperties(
            message_id=uuid.uuid4().hex, message_type=kind, tag=tag, keys=keys,
            **({"message_group": group} if group else {}))),
    NAMES, st.binary(max_size=64), st.sampled_from([0, 1, 2, 3, 4, 99]),
    st.text(max_size=10), st.lists(st.text(max_size=8), max_size=3),
    st.sampled_from(["", "g0"]), st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                                 max_size=3))
QUEUES = st.builds(lambda t, i: pb.MessageQueue(topic=resource(t), id=i), NAMES,
                   st.integers(-(2 ** 31), 2 ** 31 - 1))
CALLS = st.one_of(
    st.builds(lambda m: ("SendMessage", svc.SendMessageRequest(messages=m)),
              st.lists(MESSAGES, max_size=3)),
    st.builds(lambda t: ("QueryRoute", svc.QueryRouteRequest(topic=resource(t))), NAMES),
    st.builds(lambda t, g: ("QueryAssignment", svc.QueryAssignmentRequest(
        topic=resource(t), group=resource(g))), NAMES, NAMES),
    st.builds(lambda g, t, h: ("AckMessage", svc.AckMessageRequest(
        group=resource(g), topic=resource(t),
        entries=[svc.AckMessageEntry(message_id="m", receipt_handle=h)])),
        NAMES, NAMES, st.text(max_size=60)),
    st.builds(lambda g, t, h, d: ("ChangeInvisibleDuration",
                                  svc.ChangeInvisibleDurationRequest(
                                      group=resource(g), topic=resource(t), receipt_handle=h,
                                      invisible_duration=d, message_id="m")),
              NAMES, NAMES, st.text(max_size=60), DURATIONS),
    st.builds(lambda t, tid, res, src: ("EndTransaction", svc.EndTransactionRequest(
        topic=resource(t), message_id="m", transaction_id=tid, resolution=res, source=src)),
        NAMES, st.sampled_from(["", "0", "-1", "99999999999999999999", "abc"]),
        st.integers(0, 5), st.integers(0, 3)),
    st.builds(lambda g, q: ("GetOffset", svc.GetOffsetRequest(group=resource(g),
                                                              message_queue=q)),
              NAMES, QUEUES),
    st.builds(lambda q, p: ("QueryOffset", svc.QueryOffsetRequest(
        message_queue=q, query_offset_policy=p)), QUEUES, st.integers(0, 5)),
    st.builds(lambda g, q, o: ("UpdateOffset", svc.UpdateOffsetRequest(
        group=resource(g), message_queue=q, offset=o)),
        NAMES, QUEUES, st.integers(-(2 ** 63), 2 ** 63 - 1)),
    st.builds(lambda g, t, h: ("ForwardMessageToDeadLetterQueue",
                               svc.ForwardMessageToDeadLetterQueueRequest(
                                   group=resource(g), topic=resource(t), receipt_handle=h,
                                   message_id="m")), NAMES, NAMES, st.text(max_size=60)),
    st.builds(lambda: ("Heartbeat", svc.HeartbeatRequest())),
    st.builds(lambda: ("NotifyClientTermination", svc.NotifyClientTerminationRequest())),
)


@pytest.fixture(scope="module")
def grpc_stub(target):
    return rpc.Stub(grpc.insecure_channel(target.ready["grpc"]))


@FUZZ
@given(call=CALLS, client_id=st.sampled_from(["fuzz-1", "fuzz-2", ""]))
def test_grpc_calls_with_arbitrary_fields_get_a_status(grpc_stub, call, client_id):
    name, request = call
    meta = [("x-mq-client-id", client_id)] if client_id else []
    try:
        r = getattr(grpc_stub, name)(request, metadata=meta, timeout=15)
    except grpc.RpcError as e:  # an exception in a handler reaches the client as UNKNOWN
        assert e.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), \
            f"{name}: {e.code()} {e.details()}"
        return
    assert r.status.code != 0 or name == "Heartbeat", r


@settings(FUZZ, max_examples=max(10, EXAMPLES // 5))  # (each may poll 100 ms)
@given(group=NAMES, queue=QUEUES, invisible=DURATIONS,
       expression=st.text(max_size=20), kind=st.integers(0, 3), size=st.integers(-5, 100))
def test_grpc_receives_with_arbitrary_fields_end_with_a_status(grpc_stub, group, queue,
                                                               invisible, expression, kind,
                                                               size):
    request = svc.ReceiveMessageRequest(
        group=resource(group), message_queue=queue, batch_size=size,
        filter_expression=pb.FilterExpression(type=kind, expression=expression),
        invisible_duration=invisible, long_polling_timeout={"seconds": 0, "nanos": 100_000_000})
    try:
        replies = list(grpc_stub.ReceiveMessage(request, metadata=[("x-mq-client-id", "fr")],
                                                timeout=15))
    except grpc.RpcError as e:
        assert e.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), \
            f"ReceiveMessage: {e.code()} {e.details()}"
        return
    assert any(r.HasField("status") for r in replies), replies


def test_the_broker_still_takes_and_serves_a_message_after_the_fuzzing(target):
    async def main():
        async with Producer("after", target.namesrv) as p:
            sent = await p.send(Message("AfterFuzzing", b"still here"))
        async with PullConsumer("after", target.namesrv) as c:
            q = next(q for q in await c.fetch_queues("AfterFuzzing")
                     if q.queue_id == sent.queue.queue_id)
            got = await c.pull(q, sent.queue_offset, 1)
            return got.status, [m.body for m in got.messages]
    status, bodies = asyncio.run(main())
    assert status is PullStatus.FOUND and bodies == [b"still here"]
