"""The gRPC endpoint's CPU per call without the kernel (#33): a real Broker and store in
this process, the endpoint's HTTP/2 connection fed the frames RocketMQ 5's Java client
sends (its 15 header fields, a request id, a date and a timeout new each call, coded as
its HPACK encoder codes them, and a connection WINDOW_UPDATE), one call at a time:
SendMessage of one 100-byte message, and AckMessage of one message popped before.
JSON rows: µs per call, the median of 5 rounds, native and (in a child process)
LEDGERMQ_PURE=1.

    python bench/grpc_micro.py [--calls 5000] [--profile]
"""
from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import hpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.request_micro import (  # noqa: E402
    TOPIC, CountingTransport, make_broker, micro_main,
)
from ledgermq.apis import definition_pb2 as pb  # noqa: E402
from ledgermq.apis import rpc  # noqa: E402
from ledgermq.apis import service_pb2 as svc  # noqa: E402
from ledgermq.broker import Broker  # noqa: E402
from ledgermq.broker.grpc.messaging import MessagingService  # noqa: E402
from ledgermq.grpcserver import GrpcServer, frames, methods_of  # noqa: E402

ROUNDS = 5
SERVICE = b"/apache.rocketmq.v2.MessagingService/"


class Transport(CountingTransport):
    """Counts what the connection writes; keeps the last write (its trailers say OK)."""

    last = b""

    def write(self, data) -> None:
        super().write(data)
        self.last = bytes(data)

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        raise RuntimeError("the connection was closed: a call broke the protocol")

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class JavaClient:
    """Frames as RocketMQ 5's Java client sends a unary call, stream after stream."""

    def __init__(self) -> None:
        self.encoder, self.stream = hpack.Encoder(), -1

    def call(self, method: bytes, request: bytes) -> bytes:
        self.stream += 2
        i = self.stream // 2
        block = self.encoder.encode([
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", SERVICE + method),
            (b":authority", b"127.0.0.1:8081"), (b"content-type", b"application/grpc"),
            (b"te", b"trailers"), (b"user-agent", b"grpc-java-netty/1.50.0"),
            (b"x-mq-language", b"JAVA"), (b"x-mq-protocol", b"v2"),
            (b"x-mq-client-version", b"5.0.8"), (b"x-mq-client-id", b"host@1234#5678"),
            (b"x-mq-date-time", b"20261129T10%04dZ" % (i // 100)),
            (b"x-mq-request-id", str(uuid.uuid4()).encode()),
            (b"grpc-accept-encoding", b"gzip"), (b"grpc-timeout", b"%dm" % (3000 - i % 7))])
        return (frames.frame(frames.HEADERS, frames.END_HEADERS, self.stream, block) +
                frames.frame(frames.DATA, frames.END_STREAM, self.stream, b"\x00" +
                             len(request).to_bytes(4, "big") + request) +
                frames.window_update(0, 200))


def send_request(i: int) -> bytes:
    return svc.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=TOPIC), body=b"x" * 100,
        system_properties=pb.SystemProperties(
            message_id="01AABBCCDDEEFF0000%016X" % i, message_type=pb.NORMAL,
            born_timestamp={"seconds": 1_700_000_000}))]).SerializeToString()


def ack_request(b: Broker, n: int) -> list[bytes]:
    """AckMessage requests, one message each, for `n` messages popped now."""
    out: list[bytes] = []
    while len(out) < n:
        popped = b.pop.pop("grpc-ack", TOPIC, 32, 600_000, False, None, None)
        if not popped:
            raise RuntimeError("nothing left to pop for the ack rows")
        out += [svc.AckMessageRequest(
            group=pb.Resource(name="grpc-ack"), topic=pb.Resource(name=TOPIC),
            entries=[svc.AckMessageEntry(message_id=p.message.properties.get("UNIQ_KEY", ""),
                                         receipt_handle=p.handle.encode())]
        ).SerializeToString() for p in popped]
    return out[:n]


async def drive(conn, transport: Transport, reads: list[bytes]) -> float:
    """Seconds to feed every read and have every call answered."""
    t0 = time.perf_counter()
    for data in reads:
        conn.data_received(data)
        while conn.calls:  # (a call that waits, an ack for its log write: let the loop run)
            await asyncio.sleep(0)
    elapsed = time.perf_counter() - t0
    if b"grpc-status\x010" not in transport.last:
        raise RuntimeError(f"a call was not answered OK: {transport.last[-120:]!r}")
    return elapsed


async def measure(n: int, profile: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="grpc-micro-") as tmp:
        b = await make_broker(Path(tmp))
        try:
            await b.pop.ready()
            server = GrpcServer(methods_of(rpc.SERVICE, MessagingService(b)),
                                max_message=1 << 20, max_streams=100)
            conn, transport, client = server.protocol(), Transport(), JavaClient()
            conn.connection_made(transport)
            conn.data_received(frames.PREFACE)
            sends = [client.call(b"SendMessage", send_request(i)) for i in range(2000)]
            await drive(conn, transport, sends)  # (warm-up)
            for label, method, requests in (
                    ("SendMessage, one message (the Java client's headers)", b"SendMessage",
                     lambda r: [send_request(i) for i in range(r * n, (r + 1) * n)]),
                    ("AckMessage, one message", b"AckMessage",
                     lambda r: ack_request(b, n))):
                prof = cProfile.Profile() if profile else None
                rounds = []
                for r in range(ROUNDS):
                    reads = [client.call(method, q) for q in requests(r)]
                    if prof:
                        prof.enable()
                    rounds.append(await drive(conn, transport, reads) * 1e6 / n)
                    if prof:
                        prof.disable()
                if prof:
                    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
                rows.append({"call": label, "us_per_call": round(statistics.median(rounds), 1),
                             "rounds": [round(x, 1) for x in rounds]})
        finally:
            b.store.close()
    return rows


def main() -> None:
    micro_main(__file__, "grpc calls, in process", "calls", 5000, measure)

if __name__ == "__main__":
    main()
