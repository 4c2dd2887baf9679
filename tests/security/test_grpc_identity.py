"""gRPC identity per caller, not per client id (#31): raw gRPC calls (our generated stubs)
against a real `ledgermq dev` with aclEnable. A client id is only a name any caller can
send: authorization comes from each call's own credentials; a telemetry stream, its
session and its check-backs belong to the connection and account that opened it; offsets
and receipt handles are honoured only for what the caller may read."""
import hashlib
import hmac
import os
import subprocess
import sys
import threading
import time
import uuid

import grpc
import pytest

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from ledgermq.broker.pop.bookkeeping import Handle

from ..dev_process import DevProcess
from ..wait import wait_until
from .accounts import ACL, ADMIN, ALICE, MALLORY


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("grpc-acl")
    (d / "plain_acl.yml").write_text(ACL)
    p = DevProcess(d / "dev", {
        "grpcServerPort": "0", "aclEnable": "true", "aclFile": str(d / "plain_acl.yml"),
        # a send waits for its fsync: calls interleave on the event loop
        "flushDiskType": "SYNC_FLUSH", "transactionTimeOut": "300",
        "transactionCheckInterval": "200"}).start()
    try:
        create_topics(p)
        yield p
    finally:
        p.stop()


def create_topics(d):
    env = {**os.environ, "LEDGERMQ_ACCESS_KEY": ADMIN[0], "LEDGERMQ_SECRET_KEY": ADMIN[1]}
    for topic in ("Alice", "Secret", "Mallory"):
        subprocess.run([sys.executable, "-m", "ledgermq", "admin", "updateTopic", "-n",
                        d.namesrv, "-b", d.broker, "-t", topic, "-r", "1", "-w", "1"],
                       check=True, capture_output=True, timeout=30, env=env)


def credentials(who) -> list[tuple[str, str]]:
    ak, sk = who
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    sig = hmac.new(sk.encode(), when.encode(), hashlib.sha1).hexdigest().upper()
    return [("x-mq-date-time", when), ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, "
                                                         f"SignedHeaders=x-mq-date-time, Signature={sig}")]


def stub(d, who, client_id: str):
    """A fresh connection (its own peer address) calling as `who` with `client_id`."""
    channel = grpc.insecure_channel(d.ready["grpc"],  # (not a connection shared in-process)
                                    options=[("grpc.use_local_subchannel_pool", 1)])
    return (rpc.Stub(channel),
            [("x-mq-client-id", client_id)] + credentials(who))


def message(topic: str, kind=pb.NORMAL) -> pb.Message:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex, message_type=kind)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=b"x")


def test_each_call_is_authorized_by_its_own_credentials(broker):
    """Alice's sends into Secret are refused however an admin's calls with the same
    client id interleave with hers (before: the last caller's account was the client
    id's, and the broker checked a waiting call's next message against it)."""
    stop = threading.Event()

    def admin_calls():
        s, meta = stub(broker, ADMIN, "shared")
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            s.SendMessage(svc.SendMessageRequest(messages=[message("Alice")]),
                          metadata=meta, timeout=10)
    t = threading.Thread(target=admin_calls)
    t.start()
    try:
        s, meta = stub(broker, ALICE, "shared")
        leaked, refused = 0, 0
        for _ in range(40):
            r = s.SendMessage(svc.SendMessageRequest(
                messages=[message("Alice"), message("Secret")]), metadata=meta, timeout=10)
            leaked += r.entries[1].status.code == pb.OK
            refused += "may not publish to topic Secret" in r.entries[1].status.message
    finally:
        stop.set()
        t.join(30)
    assert leaked == 0 and refused == 40


def open_stream(d, who, client_id, topics):
    """A telemetry stream that declares `topics` as publishing; (first reply, the call, a
    list the stream's later commands are put into)."""
    s, meta = stub(d, who, client_id)
    first = threading.Event()
    got: list = []
    stop = threading.Event()

    def requests():
        yield svc.TelemetryCommand(settings=pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(
                topics=[pb.Resource(name=t) for t in topics])))
        stop.wait(30)
    call = s.Telemetry(requests(), metadata=meta, timeout=30)

    def read():
        try:
            for cmd in call:
                got.append(cmd)
                first.set()
        except grpc.RpcError:
            first.set()
    threading.Thread(target=read, daemon=True).start()
    assert first.wait(10), "no reply on the telemetry stream"
    return got, call, stop


def test_a_second_caller_cannot_take_over_a_client_ids_stream_or_end_its_session(broker):
    got, call, stop = open_stream(broker, ALICE, "alice-1", ["Alice"])
    try:
        assert got[0].status.code == pb.OK, got[0].status
        theirs, their_call, their_stop = open_stream(broker, MALLORY, "alice-1", ["Alice"])
        their_stop.set()
        assert theirs[0].status.code == pb.FORBIDDEN, theirs[0].status
        assert "belongs to the connection that opened its stream" in theirs[0].status.message
        s, meta = stub(broker, MALLORY, "alice-1")
        r = s.NotifyClientTermination(svc.NotifyClientTerminationRequest(), metadata=meta,
                                      timeout=10)
        assert r.status.code == pb.FORBIDDEN, r.status
        # the same account from another connection is another caller too
        s, meta = stub(broker, ALICE, "alice-1")
        r = s.NotifyClientTermination(svc.NotifyClientTerminationRequest(), metadata=meta,
                                      timeout=10)
        assert r.status.code == pb.FORBIDDEN, r.status
    finally:
        stop.set()
        call.cancel()


def test_declaring_a_topic_does_not_get_its_check_backs_without_pub(broker):
    """Mallory declares Secret as a publishing topic: an open transaction in Secret is
    never checked back through her stream."""
    got, call, stop = open_stream(broker, MALLORY, "mallory-1", ["Secret", "Mallory"])
    try:
        s, meta = stub(broker, ADMIN, "admin-tx")
        r = s.SendMessage(svc.SendMessageRequest(messages=[message("Secret", pb.TRANSACTION)]),
                          metadata=meta, timeout=10)
        assert r.status.code == pb.OK, r.status
        mine = s.SendMessage(svc.SendMessageRequest(
            messages=[message("Mallory", pb.TRANSACTION)]), metadata=meta, timeout=10)
        assert mine.status.code == pb.OK, mine.status
        # her own topic's check-back reaches her: the stream works, and a check round ran
        wait_until(lambda: any(c.HasField("recover_orphaned_transaction_command")
                               for c in got), "a check-back on her stream", timeout=15)
        topics = [c.recover_orphaned_transaction_command.message.topic.name for c in got
                  if c.HasField("recover_orphaned_transaction_command")]
        assert "Mallory" in topics and "Secret" not in topics, topics
    finally:
        stop.set()
        call.cancel()


def test_offsets_are_read_and_written_only_for_the_callers_group_and_topic(broker):
    s, meta = stub(broker, ALICE, "alice-offsets")
    mq = pb.MessageQueue(topic=pb.Resource(name="Alice"), id=0)
    for group in ("bob-group",):
        r = s.GetOffset(svc.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq),
                        metadata=meta, timeout=10)
        assert r.status.code == pb.UNAUTHORIZED and "group bob-group" in r.status.message
        r = s.UpdateOffset(svc.UpdateOffsetRequest(group=pb.Resource(name=group),
                                                   message_queue=mq, offset=0),
                           metadata=meta, timeout=10)
        assert r.status.code == pb.UNAUTHORIZED and "group bob-group" in r.status.message
    secret = pb.MessageQueue(topic=pb.Resource(name="Secret"), id=0)
    r = s.QueryOffset(svc.QueryOffsetRequest(message_queue=secret,
                                             query_offset_policy=pb.END), metadata=meta,
                      timeout=10)
    assert r.status.code == pb.UNAUTHORIZED and "topic Secret" in r.status.message
    r = s.UpdateOffset(svc.UpdateOffsetRequest(group=pb.Resource(name="alice-group"),
                                               message_queue=mq, offset=0),
                       metadata=meta, timeout=10)
    assert r.status.code == pb.OK, r.status


def test_a_receipt_handle_is_honoured_only_for_its_own_topic(broker):
    s, meta = stub(broker, ALICE, "alice-acks")
    forged = Handle("broker-a", "Secret", 0, 0, int(time.time() * 1000), 60_000).encode()
    for call in (
        lambda: s.AckMessage(svc.AckMessageRequest(
            group=pb.Resource(name="alice-group"), topic=pb.Resource(name="Alice"),
            entries=[svc.AckMessageEntry(message_id="m", receipt_handle=forged)]),
            metadata=meta, timeout=10).entries[0].status,
        lambda: s.ChangeInvisibleDuration(svc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="alice-group"), topic=pb.Resource(name="Alice"),
            receipt_handle=forged, invisible_duration={"seconds": 30}, message_id="m"),
            metadata=meta, timeout=10).status,
    ):
        st = call()
        assert st.code == pb.INVALID_RECEIPT_HANDLE, st
        assert "receipt handle of topic Secret, not of Alice" in st.message, st
