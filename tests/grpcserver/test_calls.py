"""ledgermq's gRPC server (ledgermq/grpcserver) as grpcio's client sees it, on real sockets:
unary, server-streaming and bidirectional calls, the context, flow control on a client that
grants little window, compression, refusals and faults, cancellation, and stopping."""
import grpc
import pytest

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from tests.wait import wait_until

from .serving import ServerThread


@pytest.fixture(scope="module")
def server():
    with ServerThread() as s:
        yield s


@pytest.fixture
def stub(server):
    with grpc.insecure_channel(server.target) as ch:
        yield rpc.Stub(ch)


def connections_idle(server) -> bool:
    """No call left open and no request byte held on any connection."""
    return server.call(lambda: all(not c.calls and c.buffered == 0
                                   for c in server.server.connections))


def test_a_unary_call_sees_its_metadata_peer_and_deadline(server):
    with grpc.insecure_channel(server.target) as ch:
        r = rpc.Stub(ch).Heartbeat(svc.HeartbeatRequest(group=pb.Resource(name="g")),
                                   metadata=[("x-mq-client-id", "client-7")], timeout=5)
        peer_port = int(server.call(lambda: next(iter(server.server.connections)).peer
                                    .rsplit(":", 1)[1]))
    client_id, peer, left, group = r.status.message.split("|")
    assert (client_id, group) == ("client-7", "g")
    assert peer == f"ipv4:127.0.0.1:{peer_port}"
    assert 0 < float(left) <= 5.0


def test_a_call_without_a_deadline_has_no_time_limit(stub):
    assert stub.Heartbeat(svc.HeartbeatRequest()).status.message.split("|")[2] == "None"


def test_a_large_request_arrives_whole(stub):
    body = bytes(range(256)) * 3000  # 768 KB: many DATA frames, past the default window
    r = stub.SendMessage(svc.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name="t"), body=body)]))
    assert r.status.message == str(len(body))


def test_a_stream_larger_than_the_clients_window_arrives_in_order(server):
    # without BDP probing grpcio grants 64 KiB: 2 MB must wait for its WINDOW_UPDATEs
    with grpc.insecure_channel(server.target, options=[("grpc.http2.bdp_probe", 0)]) as ch:
        replies = list(rpc.Stub(ch).ReceiveMessage(svc.ReceiveMessageRequest(
            batch_size=100, invisible_duration={"seconds": 20}), timeout=30))
    assert [r.status.message[:6] for r in replies] == [f"{i:06d}" for i in range(100)]
    assert all(len(r.status.message) == 6 + 20 * 1024 for r in replies)
    wait_until(lambda: connections_idle(server), "the stream's call closed", timeout=5)


def test_a_bidirectional_stream_answers_each_command_in_order(stub):
    commands = (svc.TelemetryCommand(status=pb.Status(message=f"c{i}")) for i in range(50))
    assert [r.status.message for r in stub.Telemetry(commands, timeout=10)] == \
        [f"c{i}" for i in range(50)]


def test_a_compressed_request_is_read(stub):
    body = b"compressible " * 10_000
    r = stub.SendMessage(svc.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name="t"), body=body)]), compression=grpc.Compression.Gzip)
    assert r.status.message == str(len(body))


def raw_call_error(server, method: str, request: bytes) -> grpc.RpcError:
    """The error a call of `method` with these request bytes ends with."""
    with grpc.insecure_channel(server.target) as ch:
        call = ch.unary_unary(f"/apache.rocketmq.v2.MessagingService/{method}")
        with pytest.raises(grpc.RpcError) as e:
            call(request)
    return e.value


def test_an_unknown_method_is_unimplemented(server):
    e = raw_call_error(server, "NoSuchCall", b"")
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "NoSuchCall" in e.details()


def test_a_refusal_reaches_the_client_with_its_code_and_message(stub):
    with pytest.raises(grpc.RpcError) as e:
        stub.SendMessage(svc.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name="refuse"))]))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.value.details() == "naïve refusal: 100% full"  # (percent-encoded on the wire)


def test_a_handlers_fault_answers_unknown_and_the_server_goes_on(stub):
    with pytest.raises(grpc.RpcError) as e:
        stub.SendMessage(svc.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name="fault"))]))
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert "ValueError" in e.value.details()
    assert stub.Heartbeat(svc.HeartbeatRequest()).status.code == pb.OK


def test_a_request_over_the_limit_is_refused_and_not_read_further(stub, server):
    with pytest.raises(grpc.RpcError) as e:
        stub.SendMessage(svc.SendMessageRequest(messages=[pb.Message(
            topic=pb.Resource(name="t"), body=b"x" * (2 << 20))]))  # the limit: 1 MiB
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than the 1048576 B" in e.value.details()
    assert stub.Heartbeat(svc.HeartbeatRequest()).status.code == pb.OK
    wait_until(lambda: connections_idle(server), "the refused request's bytes released",
               timeout=5)


def test_a_request_that_does_not_parse_is_an_invalid_argument(server):
    e = raw_call_error(server, "Heartbeat", b"\xff\xff\xff")
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "HeartbeatRequest" in e.details()


def test_a_call_the_client_abandons_cancels_its_handler(stub, server):
    before = server.servicer.hanging_cancelled
    with pytest.raises(grpc.RpcError) as e:
        stub.AckMessage(svc.AckMessageRequest(), timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: server.servicer.hanging_cancelled == before + 1,
               "the handler cancelled by the client's RST_STREAM", timeout=5)
    wait_until(lambda: connections_idle(server), "the call forgotten", timeout=5)


def test_stopping_ends_open_calls_with_unavailable():
    with ServerThread() as s, grpc.insecure_channel(s.target) as ch:
        waiting = rpc.Stub(ch).AckMessage.future(svc.AckMessageRequest(), timeout=20)
        wait_until(lambda: s.call(lambda: sum(len(c.calls) for c in s.server.connections)),
                   "the call open at the server", timeout=5)
        s.call(s.server.stop, 0.2)
        with pytest.raises(grpc.RpcError) as e:
            waiting.result(10)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert s.servicer.hanging_cancelled == 1
