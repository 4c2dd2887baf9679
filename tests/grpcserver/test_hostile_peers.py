"""Peers that break HTTP/2 (ledgermq/grpcserver): each gets GOAWAY with the error its fault
names (RFC 9113 §5.4.1) or its stream reset, the server keeps serving everyone else, and
no request byte stays held. Last, arbitrary frames fed to a connection in process: nothing
escapes it and its accounting holds."""
import logging
import os
import socket
import struct
import time

import grpc
import hpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import rpc
from ledgermq.apis import service_pb2 as svc
from ledgermq.grpcserver import frames as f

from .serving import InProcessTransport, ServerThread

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
HEARTBEAT = b"/apache.rocketmq.v2.MessagingService/Heartbeat"
HANG = b"/apache.rocketmq.v2.MessagingService/AckMessage"


@pytest.fixture(scope="module")
def server():
    with ServerThread(max_streams=2) as s:
        yield s


def request_headers(path: bytes, encoder: hpack.Encoder | None = None) -> bytes:
    return (encoder or hpack.Encoder()).encode([
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
        (b":authority", b"test"), (b"content-type", b"application/grpc"), (b"te", b"trailers")])


class RawPeer:
    """A socket speaking frames by hand."""

    def __init__(self, server, preface: bytes = f.PREFACE + f.settings({})):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        self.sock.sendall(preface)
        self.buf = b""

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def frames(self, until, timeout: float = 5.0):
        """Frames read (kind, flags, stream, payload) until `until(frame)` or EOF."""
        out, end = [], time.monotonic() + timeout
        while time.monotonic() < end:
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + n:
                    break
                fr = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big"),
                      self.buf[9:9 + n])
                self.buf = self.buf[9 + n:]
                out.append(fr)
                if until(fr):
                    return out
            data = self.sock.recv(65536)
            if not data:
                out.append(("EOF",))
                return out
            self.buf += data
        raise AssertionError(f"no awaited frame in {timeout} s: {out}")

    def goaway(self) -> tuple[int, bytes]:
        """The GOAWAY's error code and reason; the server closes after it."""
        got = self.frames(lambda fr: fr[0] == f.GOAWAY)
        payload = got[-1][3]
        assert self.frames(lambda fr: False)[-1] == ("EOF",), "still open after GOAWAY"
        return f.u32(payload, 4), payload[8:]

    def close(self):
        self.sock.close()


def serves(server) -> bool:
    with grpc.insecure_channel(server.target) as ch:
        return rpc.Stub(ch).Heartbeat(svc.HeartbeatRequest(), timeout=5).status.code == pb.OK


@pytest.mark.parametrize("what,frames,code", [
    ("an HTTP/1.1 request", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"], f.PROTOCOL_ERROR),
    ("a frame over the size allowed", [f.frame(f.DATA, 0, 1, b"x" * ((1 << 20) + 1))],
     f.FRAME_SIZE_ERROR),
    ("a header block that does not decode", [f.frame(f.HEADERS, 5, 1, b"\xff\xff\xff\xff")],
     f.COMPRESSION_ERROR),
    ("DATA on a stream never opened", [f.frame(f.DATA, 0, 7, b"abc")], f.PROTOCOL_ERROR),
    ("HEADERS on an even stream", [f.frame(f.HEADERS, 5, 2, request_headers(HEARTBEAT))],
     f.PROTOCOL_ERROR),
    ("a PING of 3 bytes", [f.frame(f.PING, 0, 0, b"abc")], f.FRAME_SIZE_ERROR),
    ("a PUSH_PROMISE", [f.frame(f.PUSH_PROMISE, 4, 1, b"\x00\x00\x00\x02")], f.PROTOCOL_ERROR),
    ("a window past 2^31-1", [f.window_update(0, 2 ** 31 - 1)], f.FLOW_CONTROL_ERROR),
    ("a header block interrupted", [f.frame(f.HEADERS, 0, 1, request_headers(HEARTBEAT)),
                                    f.frame(f.PING, 0, 0, b"12345678")], f.PROTOCOL_ERROR),
])
def test_a_protocol_error_ends_that_connection_only(server, what, frames, code):
    preface = b"" if what.startswith("an HTTP/1.1") else f.PREFACE + f.settings({})
    peer = RawPeer(server, preface)
    peer.send(*frames)
    got_code, why = peer.goaway()
    peer.close()
    assert got_code == code, (what, why)
    assert why, "GOAWAY says why"
    assert serves(server)


def test_requests_held_past_the_connections_share_end_it():
    # three calls each sending most of a 1 MiB message and never its end: the connection
    # may hold 1 MiB + its 1 MiB window of requests no handler has taken
    with ServerThread(max_streams=100, connection_window=1 << 20) as s:
        peer = RawPeer(s)
        enc = hpack.Encoder()
        chunk = b"\x00" * (256 << 10)
        for stream in (1, 3, 5):
            peer.send(f.frame(f.HEADERS, f.END_HEADERS, stream, request_headers(HEARTBEAT, enc)),
                      f.frame(f.DATA, 0, stream, b"\x00" + (1 << 20).to_bytes(4, "big")),
                      *[f.frame(f.DATA, 0, stream, chunk) for _ in range(3)])
        code, why = peer.goaway()
        peer.close()
        assert code == f.ENHANCE_YOUR_CALM, why
        assert b"not yet taken" in why
        assert serves(s)


def test_more_than_one_message_on_a_unary_call_is_refused(server):
    peer = RawPeer(server)
    peer.send(f.frame(f.HEADERS, f.END_HEADERS, 1, request_headers(HEARTBEAT)),
              f.frame(f.DATA, 0, 1, b"\x00\x00\x00\x00\x00" * 1000))
    got = peer.frames(lambda fr: fr[0] == f.HEADERS and fr[2] == 1)
    peer.close()
    assert b"grpc-status" in got[-1][3] and b"not more" in got[-1][3]
    assert serves(server)


def test_streams_past_the_limit_are_refused(server):
    peer = RawPeer(server)
    enc = hpack.Encoder()
    for stream in (1, 3, 5):  # hanging calls; the limit is 2
        peer.send(f.frame(f.HEADERS, f.END_HEADERS, stream, request_headers(HANG, enc)),
                  f.frame(f.DATA, f.END_STREAM, stream, b"\x00\x00\x00\x00\x00"))
    got = peer.frames(lambda fr: fr[0] == f.RST_STREAM)
    assert (got[-1][2], f.u32(got[-1][3])) == (5, f.REFUSED_STREAM)
    peer.close()
    assert serves(server)


def test_a_reset_stream_frees_its_place(server):
    peer = RawPeer(server)
    enc = hpack.Encoder()
    for stream in (1, 3):
        peer.send(f.frame(f.HEADERS, f.END_HEADERS, stream, request_headers(HANG, enc)),
                  f.frame(f.DATA, f.END_STREAM, stream, b"\x00\x00\x00\x00\x00"))
    peer.send(f.rst_stream(1, f.CANCEL),
              f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 5,
                      request_headers(HEARTBEAT, enc)))
    got = peer.frames(lambda fr: fr[2] == 5 and fr[0] == f.HEADERS and fr[1] & f.END_STREAM)
    peer.close()
    assert not any(fr[0] == f.RST_STREAM and fr[2] == 5 for fr in got)


def test_a_ping_is_answered_with_its_payload(server):
    peer = RawPeer(server)
    peer.send(f.frame(f.PING, 0, 0, b"8 bytes!"))
    got = peer.frames(lambda fr: fr[0] == f.PING)
    peer.close()
    assert got[-1][1:] == (f.ACK, 0, b"8 bytes!")


STREAMS = st.sampled_from([1, 1, 1, 1, 3, 5])
ANY_STREAM = st.sampled_from([0, 1, 2, 3, 2 ** 31 - 1])
PATHS = st.sampled_from([HEARTBEAT, HANG, b"/apache.rocketmq.v2.MessagingService/Telemetry",
                         b"/nope"])
FRAME = st.one_of(  # mostly what a client sends, in any order; sometimes anything at all
    st.builds(lambda stream, path, end: f.frame(
        f.HEADERS, f.END_HEADERS | (f.END_STREAM if end else 0), stream,
        request_headers(path)), STREAMS, PATHS, st.booleans()),
    st.builds(lambda stream, size, data, end: f.frame(
        f.DATA, f.END_STREAM if end else 0, stream, b"\x00" + size.to_bytes(4, "big") + data),
        STREAMS, st.integers(0, 80), st.binary(max_size=40), st.booleans()),
    st.builds(lambda stream, data: f.frame(f.DATA, 0, stream, data), STREAMS,
              st.binary(max_size=40)),
    st.builds(lambda stream: f.rst_stream(stream, f.CANCEL), STREAMS),
    st.builds(f.window_update, STREAMS, st.integers(0, 2 ** 31 - 1)),
    st.builds(lambda kind, flags, stream, payload: f.frame(kind, flags, stream, payload),
              st.integers(0, 12), st.integers(0, 255), ANY_STREAM, st.binary(max_size=40)))
OPENING = st.builds(lambda path: f.frame(f.HEADERS, f.END_HEADERS, 1, request_headers(path)),
                    PATHS)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=OPENING, frames=st.lists(FRAME, max_size=16), cut=st.integers(1, 64))
def test_arbitrary_frames_never_escape_the_connection(caplog, first, frames, cut):
    import asyncio

    from ledgermq.apis import rpc as apis_rpc
    from ledgermq.grpcserver import GrpcServer, methods_of

    from .serving import Servicer

    async def run():
        server = GrpcServer(methods_of(apis_rpc.SERVICE, Servicer()), max_message=1 << 16,
                            max_streams=4)
        conn = server.protocol()
        conn.connection_made(InProcessTransport())
        data = f.PREFACE + first + b"".join(frames)
        for i in range(0, len(data), cut):  # (in pieces: frames split across reads)
            conn.data_received(data[i:i + cut])
            assert conn.buffered >= 0
            await asyncio.sleep(0)
        for _ in range(3):
            await asyncio.sleep(0)
        conn.connection_lost(None)
        await asyncio.sleep(0)
        return conn
    caplog.set_level(logging.ERROR, logger="ledgermq.grpcserver")
    conn = asyncio.run(run())
    assert not conn.calls and conn.buffered == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_client_that_never_speaks_is_closed_and_one_that_spoke_is_not(server, monkeypatch):
    from ledgermq.grpcserver import connection
    monkeypatch.setattr(connection, "PREFACE_TIMEOUT_S", 0.3)
    talking, silent = RawPeer(server), RawPeer(server, b"")
    assert silent.frames(lambda fr: False)[-1] == ("EOF",)  # (after the server's SETTINGS)
    talking.send(f.frame(f.PING, 0, 0, b"still on"))  # past the same timeout
    assert talking.frames(lambda fr: fr[0] == f.PING)[-1][3] == b"still on"
    talking.close()
    silent.close()
