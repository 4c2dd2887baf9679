"""When a unary call is answered (grpcserver/server.py, `_eagerly`): a handler that answers
without waiting is answered within the read that completed its request, in one write and no
loop turn; one that waits is answered when what it awaits completes, and its faults and
cancellation reach it as they would in any task."""
import asyncio

import pytest

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from ledgermq.grpcserver import GrpcServer, frames as f, methods_of

from .serving import InProcessTransport
from .test_hostile_peers import request_headers

SEND = b"/apache.rocketmq.v2.MessagingService/SendMessage"
HEARTBEAT = b"/apache.rocketmq.v2.MessagingService/Heartbeat"


class Gated:
    def __init__(self):
        self.gate = asyncio.get_running_loop().create_future()
        self.cancelled = False

    async def Heartbeat(self, request, context):
        return svc.HeartbeatResponse(status=pb.Status(code=pb.OK, message="at once"))

    async def SendMessage(self, request, context):
        try:
            why = await self.gate
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return svc.SendMessageResponse(status=pb.Status(code=pb.OK, message=why))


def request(stream: int, path: bytes, message: bytes = b"") -> bytes:
    return (f.frame(f.HEADERS, f.END_HEADERS, stream, request_headers(path)) +
            f.frame(f.DATA, f.END_STREAM, stream, b"\x00" + len(message).to_bytes(4, "big") +
                    message))


def answers(transport: InProcessTransport) -> dict[int, bytes]:
    """stream -> its trailers' block, for every call ended in what was written."""
    data, out = b"".join(transport.written), {}
    while data:
        n = int.from_bytes(data[:3], "big")
        kind, flags, stream = data[3], data[4], int.from_bytes(data[5:9], "big")
        if kind == f.HEADERS and flags & f.END_STREAM:
            out[stream] = data[9:9 + n]
        data = data[9 + n:]
    return out


def connect(servicer):
    conn = GrpcServer(methods_of(rpc.SERVICE, servicer), max_message=1 << 20,
                      max_streams=8).protocol()
    transport = InProcessTransport()
    conn.connection_made(transport)
    conn.data_received(f.PREFACE + f.settings({}))
    transport.written.clear()
    return conn, transport


async def turns_until(cond, turns=20):
    for _ in range(turns):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not within {turns} loop turns")


def test_an_answer_ready_at_once_is_written_in_the_same_read():
    async def run():
        conn, transport = connect(Gated())
        conn.data_received(request(1, HEARTBEAT))
        assert len(transport.written) == 1  # no loop turn yet: answered, one write
        assert b"grpc-status\x010" in answers(transport)[1]
    asyncio.run(run())


@pytest.mark.parametrize("outcome", ["result", "fault", "reset"])
def test_a_waiting_handler_is_answered_when_its_wait_ends(outcome):
    async def run():
        servicer = Gated()
        conn, transport = connect(servicer)
        conn.data_received(request(1, SEND))
        conn.data_received(request(3, HEARTBEAT))  # another call goes on meanwhile
        assert list(answers(transport)) == [3]
        if outcome == "result":
            servicer.gate.set_result("after the wait")
            await turns_until(lambda: 1 in answers(transport))
            assert b"grpc-status\x010" in answers(transport)[1]
            assert b"after the wait" in b"".join(transport.written)
        elif outcome == "fault":
            servicer.gate.set_exception(OSError("disk gone"))
            await turns_until(lambda: 1 in answers(transport))
            assert b"grpc-status\x012" in answers(transport)[1]  # UNKNOWN
            assert b"OSError: disk gone" in answers(transport)[1]
        else:
            conn.data_received(f.rst_stream(1, f.CANCEL))
            await turns_until(lambda: servicer.cancelled)
            assert 1 not in answers(transport) and not conn.calls
    asyncio.run(run())
