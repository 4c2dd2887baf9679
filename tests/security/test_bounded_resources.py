"""Bounded resources under a hostile client (#31), against a real `ledgermq dev`: one
connection's requests in flight and the time a pull is held are capped (a clear refusal
past the cap, SYSTEM_BUSY), and a client that sends requests without reading the answers
is no longer read: the answers cannot pile up in the broker's memory."""
import asyncio
import socket
import time

import pytest

from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.remoting.codes import PULL_FLAG_SUSPEND
from ledgermq.wire.message import decode_offset_msg_id

from ..dev_process import DevProcess

CAP = 20


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    p = DevProcess(tmp_path_factory.mktemp("capped"), {
        "maxInFlightRequestsPerConnection": str(CAP), "pullSuspendMaxMillis": "1500",
        "maxMessageSize": str(2 << 20), "grpcServerPort": "0",
        "grpcClientConsumerMaxLongPollingTimeoutMillis": "1500"}).start()
    yield p
    p.stop()


def send_frame(topic: str, body: bytes) -> RemotingCommand:
    return RemotingCommand(RequestCode.SEND_MESSAGE, ext={
        "producerGroup": "p", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0",
        "flag": "0", "properties": "", "reconsumeTimes": "0"}, body=body)


def held_pull(topic: str, offset: int) -> RemotingCommand:
    return RemotingCommand(RequestCode.PULL_MESSAGE, ext={
        "consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(PULL_FLAG_SUSPEND), "commitOffset": "0",
        "suspendTimeoutMillis": str(10 ** 9), "subscription": "*", "subVersion": "0"})


def test_requests_in_flight_on_one_connection_are_capped_and_pulls_held_briefly(capped):
    async def scenario():
        client = RemotingClient()
        try:
            r = await client.invoke(capped.broker, send_frame("Held", b"x"), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            start = time.monotonic()
            answers = await asyncio.gather(*(client.invoke(capped.broker, held_pull("Held", 1), 15)
                                             for _ in range(CAP + 10)))
            return answers, time.monotonic() - start
        finally:
            await client.close()
    answers, took = asyncio.run(scenario())
    busy = [a for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    assert len(busy) == 10, [a.code for a in answers]
    assert "[TOO_MANY_REQUESTS]" in busy[0].remark and f"at most {CAP}" in busy[0].remark
    held = [a for a in answers if a.code != ResponseCode.SYSTEM_BUSY]
    assert {a.code for a in held} == {ResponseCode.PULL_NOT_FOUND}
    assert took < 10, f"a pull asking to be held 10^9 ms was held {took:.1f} s"


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_its_answers_is_no_longer_read(capped):
    """200 views of a 1 MB message, sent and never read: 200 MB of answers. The broker
    stops reading the connection once its socket buffer is full and answers the rest as
    the client reads, so its memory stays within a few MB of where it was."""
    async def big_message() -> int:
        client = RemotingClient()
        try:
            r = await client.invoke(capped.broker, send_frame("Big", b"b" * (1 << 20)), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            return decode_offset_msg_id(r.ext["msgId"])[2]
        finally:
            await client.close()
    offset = asyncio.run(big_message())
    view = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext={"offset": str(offset)})
    frames = b"".join(b"".join(bytes(b) for b in RemotingCommand(
        view.code, opaque=i + 1, ext=view.ext).encode()) for i in range(200))
    before = rss_kb(capped.proc.pid)
    host, port = capped.broker.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.sendall(frames)
        peak, deadline = before, time.monotonic() + 3
        while time.monotonic() < deadline:  # the broker had every request: watch it
            peak = max(peak, rss_kb(capped.proc.pid))
            time.sleep(0.1)
        got, want = 0, 200 * (1 << 20)
        sock.settimeout(30)
        while got < want:  # now read: every answer comes
            chunk = sock.recv(1 << 20)
            assert chunk, f"connection closed after {got} bytes"
            got += len(chunk)
    assert peak - before < 64 << 10, f"RSS grew {(peak - before) >> 10} MB while unread"


def test_a_grpc_receive_polls_no_longer_than_the_broker_allows(capped):
    import grpc

    from ledgermq.apis import definition_pb2 as pb
    from ledgermq.apis import rpc
    from ledgermq.apis import service_pb2 as svc
    asyncio.run(_send(capped, "Polled"))
    stub = rpc.Stub(grpc.insecure_channel(capped.ready["grpc"]))
    start = time.monotonic()
    replies = list(stub.ReceiveMessage(svc.ReceiveMessageRequest(
        group=pb.Resource(name="poller"), message_queue=pb.MessageQueue(
            topic=pb.Resource(name="Polled"), id=-1), batch_size=1,
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="nothing-has-this"),
        invisible_duration={"seconds": 30}, long_polling_timeout={"seconds": 600}),
        metadata=[("x-mq-client-id", "poller-1")], timeout=40))
    took = time.monotonic() - start
    assert replies[0].status.code == pb.MESSAGE_NOT_FOUND, replies[0].status
    assert took < 10, f"a receive asking to poll 600 s polled {took:.1f} s"


async def _send(dev, topic):
    client = RemotingClient()
    try:
        r = await client.invoke(dev.broker, send_frame(topic, b"x"), 5)
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        await client.close()


def test_topics_and_groups_clients_create_are_limited_per_minute(tmp_path):
    """A client inventing topic or group names in a loop: past the limit of a minute,
    SYSTEM_BUSY naming the limit and nothing created (retry topics count as topics)."""
    import json
    d = DevProcess(tmp_path / "dev", {"maxTopicsCreatedPerMinute": "20",
                                      "maxGroupsCreatedPerMinute": "5"}).start()

    async def scenario():
        client = RemotingClient()
        try:
            beats = []
            for i in range(8):
                body = json.dumps({"clientID": "c@1", "producerDataSet": [],
                                   "consumerDataSet": [{
                                       "groupName": f"invented-{i}", "messageModel": "CLUSTERING",
                                       "consumeType": "CONSUME_PASSIVELY",
                                       "subscriptionDataSet": []}]}).encode()
                beats.append(await client.invoke(d.broker, RemotingCommand(
                    RequestCode.HEART_BEAT, body=body), 5))
            sends = [await client.invoke(d.broker, send_frame(f"Invented{i}", b"x"), 5)
                     for i in range(20)]
            return beats, sends
        finally:
            await client.close()
    try:
        beats, sends = asyncio.run(scenario())
    finally:
        d.stop()
    assert [b.code for b in beats] == [ResponseCode.SUCCESS] * 5 + [ResponseCode.SYSTEM_BUSY] * 3
    assert "maxGroupsCreatedPerMinute" in beats[-1].remark
    # five retry topics came with the five groups: fifteen more topics, then refused
    assert [s.code for s in sends] == [ResponseCode.SUCCESS] * 15 + [ResponseCode.SYSTEM_BUSY] * 5
    assert "[TOO_MANY_NEW_TOPICS]" in sends[-1].remark


def test_the_producer_groups_one_client_names_are_capped(capped):
    """A heartbeat naming 200 producer groups: the broker keeps the first 64 the
    connection named (each listed by producerConnection), not the rest."""
    import json

    from ledgermq.broker.processors.consumer_manage import MAX_PRODUCER_GROUPS_PER_CONNECTION

    async def go():
        client = RemotingClient()
        try:
            beat = RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps({
                "clientID": "hostile", "consumerDataSet": [],
                "producerDataSet": [{"groupName": f"pg-{i}"} for i in range(200)]}).encode())
            assert (await client.invoke(capped.broker, beat, 5)).code == ResponseCode.SUCCESS

            async def listed(group: str) -> bool:
                r = await client.invoke(capped.broker, RemotingCommand(
                    RequestCode.GET_PRODUCER_CONNECTION_LIST, ext={"producerGroup": group}), 5)
                return r.code == ResponseCode.SUCCESS
            return [await listed(f"pg-{i}") for i in range(200)]
        finally:
            await client.close()
    kept = asyncio.run(go())
    assert sum(kept) == MAX_PRODUCER_GROUPS_PER_CONNECTION == 64


def test_a_grpc_producers_declared_topics_name_only_topics_that_exist(capped):
    """A RocketMQ 5 producer's settings name the topics it publishes to (each one's
    transaction check-backs then come to it): 300 made-up names keep nothing for the
    client, the one topic that exists is kept (listed by producerConnection)."""
    import threading

    import grpc

    from ledgermq.apis import definition_pb2 as pb
    from ledgermq.apis import rpc
    from ledgermq.apis import service_pb2 as svc
    from ledgermq.broker.grpc.convert import transaction_group
    asyncio.run(_send(capped, "Declared"))  # (auto-created: it exists)
    stub = rpc.Stub(grpc.insecure_channel(capped.ready["grpc"]))
    names = ["Declared"] + [f"made-up-{i}" for i in range(300)]
    done, replied = threading.Event(), threading.Event()

    def requests():
        yield svc.TelemetryCommand(settings=pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(
                topics=[pb.Resource(name=t) for t in names])))
        done.wait(30)
    call = stub.Telemetry(requests(), metadata=[("x-mq-client-id", "declarer-1")], timeout=30)

    def read():
        try:
            for _ in call:
                replied.set()
        except grpc.RpcError:  # (cancelled at the end)
            pass
    threading.Thread(target=read, daemon=True).start()
    try:
        assert replied.wait(10), "no reply on the telemetry stream"

        async def listed(topic: str) -> bool:
            client = RemotingClient()
            try:
                r = await client.invoke(capped.broker, RemotingCommand(
                    RequestCode.GET_PRODUCER_CONNECTION_LIST,
                    ext={"producerGroup": transaction_group(topic)}), 5)
                return r.code == ResponseCode.SUCCESS
            finally:
                await client.close()
        assert asyncio.run(listed("Declared"))
        assert not any(asyncio.run(listed(n)) for n in names[1:20])
    finally:
        done.set()
        call.cancel()
