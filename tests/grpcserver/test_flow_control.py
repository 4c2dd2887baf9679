"""The server's sending side of HTTP/2 flow control (grpcserver/connection.py, call.py): a
stream's messages go out only as far as the client's window allows, the rest and then the
trailers (once) when the client grants more; a reset stream's waiting messages are
dropped."""
import asyncio

from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from ledgermq.grpcserver import GrpcServer, frames as f, methods_of

from .serving import InProcessTransport, Servicer, ok
from .test_hostile_peers import request_headers

RECEIVE = b"/apache.rocketmq.v2.MessagingService/ReceiveMessage"


def written_frames(transport):
    data, out = b"".join(transport.written), []
    while data:
        n = int.from_bytes(data[:3], "big")
        out.append((data[3], data[4], int.from_bytes(data[5:9], "big"), data[9:9 + n]))
        data = data[9 + n:]
    return out


def stream_data(transport, stream):
    return sum(len(p) for kind, _, s, p in written_frames(transport)
               if kind == f.DATA and s == stream)


def ends(transport, stream):
    return [fl for kind, fl, s, _ in written_frames(transport)
            if kind == f.HEADERS and s == stream and fl & f.END_STREAM]


async def turns(n=20):
    for _ in range(n):
        await asyncio.sleep(0)


def open_receive(window: int):
    """A connection whose client grants `window` bytes a stream, and a receive of three
    1 KiB messages on stream 1."""
    conn = GrpcServer(methods_of(rpc.SERVICE, Servicer()), max_message=1 << 20,
                      max_streams=8).protocol()
    transport = InProcessTransport()
    conn.connection_made(transport)
    request = svc.ReceiveMessageRequest(batch_size=3,
                                        invisible_duration={"seconds": 1}).SerializeToString()
    conn.data_received(f.PREFACE + f.settings({f.INITIAL_WINDOW_SIZE: window}) +
                       f.frame(f.HEADERS, f.END_HEADERS, 1, request_headers(RECEIVE)) +
                       f.frame(f.DATA, f.END_STREAM, 1, b"\x00" +
                               len(request).to_bytes(4, "big") + request))
    return conn, transport


def test_messages_wait_for_the_window_and_the_trailers_come_once():
    async def run():
        conn, transport = open_receive(window=100)
        await turns()
        assert stream_data(transport, 1) == 100 and not ends(transport, 1)
        conn.data_received(f.window_update(1, 1000))
        await turns()
        assert stream_data(transport, 1) == 1100 and not ends(transport, 1)
        conn.data_received(f.window_update(1, 1 << 20))
        await turns()
        whole = sum(5 + len(svc.ReceiveMessageResponse(status=ok(
            f"{i:06d}" + "m" * 1024)).SerializeToString()) for i in range(3))
        assert stream_data(transport, 1) == whole
        assert len(ends(transport, 1)) == 1 and not conn.calls
    asyncio.run(run())


def test_a_reset_stream_drops_what_waits_for_its_window():
    async def run():
        conn, transport = open_receive(window=100)
        await turns()
        conn.data_received(f.rst_stream(1, f.CANCEL))
        conn.data_received(f.window_update(1, 1 << 20))  # (a late grant for a gone stream)
        await turns()
        assert stream_data(transport, 1) == 100 and not ends(transport, 1)
        assert not conn.calls and not conn.blocked
    asyncio.run(run())


def open_route(window: int, size: int):
    """A unary QueryRoute on stream 1 answered with ~`size` bytes, to a client granting
    `window` bytes a stream."""
    conn = GrpcServer(methods_of(rpc.SERVICE, Servicer()), max_message=1 << 20,
                      max_streams=8).protocol()
    transport = InProcessTransport()
    conn.connection_made(transport)
    request = svc.QueryRouteRequest(topic={"name": str(size)}).SerializeToString()
    conn.data_received(f.PREFACE + f.settings({f.INITIAL_WINDOW_SIZE: window}) +
                       f.frame(f.HEADERS, f.END_HEADERS, 1, request_headers(ROUTE)) +
                       f.frame(f.DATA, f.END_STREAM, 1, b"\x00" +
                               len(request).to_bytes(4, "big") + request))
    return conn, transport


ROUTE = b"/apache.rocketmq.v2.MessagingService/QueryRoute"


def test_a_unary_answer_goes_out_whole_in_the_read_that_asked():
    async def run():
        conn, transport = open_route(window=1 << 16, size=1000)
        ours = [(kind, flags) for kind, flags, s, _ in written_frames(transport) if s == 1]
        assert ours == [(f.HEADERS, f.END_HEADERS), (f.DATA, 0),
                        (f.HEADERS, f.END_HEADERS | f.END_STREAM)]
        answer = svc.QueryRouteResponse.FromString(
            next(p for kind, _, s, p in written_frames(transport) if kind == f.DATA)[5:])
        assert answer.status.message == "q" * 1000 and not conn.calls
    asyncio.run(run())


def test_a_unary_answer_over_the_window_waits_for_it_then_ends_once():
    async def run():
        conn, transport = open_route(window=100, size=1000)
        await turns()
        assert stream_data(transport, 1) == 100 and not ends(transport, 1)
        conn.data_received(f.window_update(1, 1 << 20))
        await turns()
        data = b"".join(p for kind, _, s, p in written_frames(transport)
                        if kind == f.DATA and s == 1)
        assert svc.QueryRouteResponse.FromString(data[5:]).status.message == "q" * 1000
        assert len(ends(transport, 1)) == 1 and not conn.calls
    asyncio.run(run())
