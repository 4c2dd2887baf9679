"""The broker's CPU per one-message request without the kernel (#32): a real Broker and
store in this process, its remoting Connection fed one-message sends one by one (as
RocketMQ's C++ client sends them, SEND_MESSAGE; as its Java client does, SEND_MESSAGE_V2
with a JSON or binary header), the Java client's SEND_BATCH_MESSAGE of 100, and
PULL_MESSAGE frames asking for 32, its replies taken by a transport that only counts
bytes; then what RocketMQ's proxy in cluster mode sends for its gRPC consumers (#33):
POP_MESSAGE asking for 32, and one ACK_MESSAGE per message, pipelined as a busy proxy's
arrive (64 a read).
JSON rows: µs per request, native and (in a child process) LEDGERMQ_PURE=1.

    python bench/request_micro.py [--requests 10000] [--profile]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Coroutine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledgermq.broker import Broker  # noqa: E402
from ledgermq.broker.config import load_broker_config  # noqa: E402
from ledgermq.broker.meta.topic_table import TopicConfig  # noqa: E402
from ledgermq.remoting import RemotingCommand, RequestCode  # noqa: E402
from ledgermq.remoting.codes import SerializeType  # noqa: E402
from ledgermq.remoting.transport import Connection  # noqa: E402
from ledgermq.wire import native  # noqa: E402
from ledgermq.wire.batch_body import encode_batch_body  # noqa: E402

TOPIC = "BenchRequests"
ROUNDS = 5


class CountingTransport:
    """Takes what the connection writes; keeps only the byte count."""

    def __init__(self) -> None:
        self.written = 0

    def writelines(self, buffers) -> None:
        self.written += sum(map(len, buffers))

    def write(self, data) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 40000) if name == "peername" else default

    def get_write_buffer_size(self) -> int:
        return 0


def send_frame(i: int, stype: SerializeType) -> bytes:
    """A SEND_MESSAGE_V2 as RocketMQ's clients send one message (their header fields)."""
    props = f"UNIQ_KEY\x01AC11000100002A9F0000{i:012X}\x02WAIT\x01true\x02"
    ext = {"a": "bench-group", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4),
           "f": "0", "g": str(1_700_000_000_000 + i), "h": "0", "i": props, "j": "0",
           "k": "false", "m": "false"}
    cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=i, ext=ext, body=b"x" * 100,
                          language="CPP", version=399, serialize_type=stype)
    return cmd.to_bytes()


def cpp_send_frame(i: int) -> bytes:
    """A SEND_MESSAGE as RocketMQ's C++ client (PyPI rocketmq 0.4.4) sends one message, as
    captured from bench/request_bench.py: the header's version 1 with its long field
    names, four of them JSON integers, the empty ACL fields, a newline after the header."""
    props = f"UNIQ_KEY\x01AC11000100002A9F0000{i:012X}\x02WAIT\x01true\x02"
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "yO1kO/80cA+95sAaBgL6jxgKeMo=",
           "batch": "0", "bornTimestamp": str(1_700_000_000_000 + i), "defaultTopic": "TBW102",
           "defaultTopicQueueNums": 4, "flag": 0, "producerGroup": "bench-group",
           "properties": props, "queueId": i % 4, "reconsumeTimes": "0", "sysFlag": 0,
           "topic": TOPIC, "unitMode": "0"}
    header = json.dumps({"code": int(RequestCode.SEND_MESSAGE), "extFields": ext, "flag": 0,
                         "language": "CPP", "opaque": i, "remark": "", "version": 63},
                        separators=(",", ":")).encode() + b"\n"
    body = b"x" * 100
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


SENDS = {"CPP": ("SEND_MESSAGE (the C++ client's JSON header)", cpp_send_frame),
         "JSON": ("SEND_MESSAGE_V2 (JSON header)",
                  lambda i: send_frame(i, SerializeType.JSON)),
         "ROCKETMQ": ("SEND_MESSAGE_V2 (ROCKETMQ header)",
                      lambda i: send_frame(i, SerializeType.ROCKETMQ))}


def batch_frame(i: int, n: int = 100) -> bytes:
    """A SEND_BATCH_MESSAGE of `n` 100-byte messages as RocketMQ's Java client sends a
    MessageBatch: each message with its own UNIQ_KEY, the header's properties those of the
    batch (its first message's)."""
    props = [f"UNIQ_KEY\x01AC11000100002A9F{i:010X}{k:04X}\x02WAIT\x01true\x02".encode()
             for k in range(n)]
    ext = {"a": "bench-group", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4),
           "f": "0", "g": str(1_700_000_000_000 + i), "h": "0",
           "i": props[0].decode(), "j": "0", "k": "false", "m": "true"}
    return RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, opaque=i, ext=ext,
                           body=encode_batch_body([b"x" * 100] * n, props, [0] * n),
                           language="JAVA", version=399,
                           serialize_type=SerializeType.ROCKETMQ).to_bytes()


def pull_frame(i: int, offset: int) -> bytes:
    ext = {"consumerGroup": "bench-pull", "topic": TOPIC, "queueId": "0",
           "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "2",
           "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "expressionType": "TAG"}
    return RemotingCommand(RequestCode.PULL_MESSAGE, opaque=i, ext=ext, language="JAVA",
                           version=399).to_bytes()


def pop_frame(i: int) -> bytes:
    return RemotingCommand(RequestCode.POP_MESSAGE, opaque=i, ext={
        "consumerGroup": "bench-pop", "topic": TOPIC, "queueId": "-1", "maxMsgNums": "32",
        "invisibleTime": "600000", "pollTime": "0", "bornTime": "0", "initMode": "1",
        "expType": "TAG", "exp": "*", "order": "false"}, language="JAVA").to_bytes()


def ack_frames(b: Broker, n: int) -> list[bytes]:
    """ACK_MESSAGE frames for `n` messages popped now, 64 to a read (as RocketMQ's proxy
    sends them: the extra info its client built from the pop answer)."""
    frames = []
    while len(frames) < n:
        popped = b.pop.pop("bench-ack", TOPIC, 32, 600_000, False, None, None)
        if not popped:
            raise RuntimeError("nothing left to pop for the ack rows")
        for p in popped:
            h = p.handle
            extra = f"{h.offset} {h.stamp} {h.invisible_ms} 0 0 {h.broker} {h.queue_id} {h.offset}"
            frames.append(RemotingCommand(RequestCode.ACK_MESSAGE, opaque=len(frames), ext={
                "consumerGroup": "bench-ack", "topic": TOPIC, "queueId": str(h.queue_id),
                "extraInfo": extra, "offset": str(h.offset)}, language="JAVA").to_bytes())
    return [b"".join(frames[i:i + 64]) for i in range(0, n, 64)]


async def make_broker(d: Path, **more: str) -> Broker:
    bcfg, scfg, unknown = load_broker_config(None, {
        "storePathRootDir": str(d), "listenPort": "0", "brokerRole": "ASYNC_MASTER",
        "mappedFileSizeCommitLog": str(256 << 20), **more})
    assert not unknown, unknown
    b = Broker(bcfg, scfg, standalone=True)
    b.store.open()
    b.topics.create(TopicConfig(TOPIC, 4, 4))
    return b


async def drive(frames: list[bytes], b: Broker) -> float:
    """Seconds to feed every frame, one data_received each, every reply written."""
    conn = Connection(b.handle)
    conn.connection_made(CountingTransport())
    t0 = time.perf_counter()
    for f in frames:
        conn.data_received(f)
        if conn.in_flight:  # (a reply waits for the loop: let it run)
            await asyncio.sleep(0)
    while conn.in_flight:
        await asyncio.sleep(0)
    return time.perf_counter() - t0


async def measure(n: int, profile: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="request-micro-") as tmp:
        b = await make_broker(Path(tmp))
        try:
            for label, make in SENDS.values():
                await drive([make(i) for i in range(2000)], b)  # warm-up
                prof = cProfile.Profile() if profile else None
                if prof:
                    prof.enable()
                rounds = []  # the median of 5 rounds: a round can meet a page fault storm
                for r in range(ROUNDS):
                    frames = [make(i) for i in range(r * n, (r + 1) * n)]
                    rounds.append(await drive(frames, b) * 1e6 / n)
                if prof:
                    prof.disable()
                    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
                rows.append({"request": label,
                             "us_per_request": round(statistics.median(rounds), 1),
                             "rounds": [round(x, 1) for x in rounds]})
            rounds = []
            for r in range(ROUNDS):
                batches = [batch_frame(r * n + i) for i in range(n // 100)]
                rounds.append(await drive(batches, b) * 1e6 / (len(batches) * 100))
            rows.append({"request": "SEND_BATCH_MESSAGE (100 messages), per message",
                         "us_per_request": round(statistics.median(rounds), 1),
                         "rounds": [round(x, 1) for x in rounds]})
            rounds = []
            for r in range(ROUNDS):
                pulls = [pull_frame(i, (i * 32) % (n - 32)) for i in range(n // 10)]
                rounds.append(await drive(pulls, b) * 1e6 / len(pulls))
            rows.append({"request": "PULL_MESSAGE (32 messages)",
                         "us_per_request": round(statistics.median(rounds), 1),
                         "rounds": [round(x, 1) for x in rounds]})
            await b.pop.ready()
            rounds = []
            for r in range(ROUNDS):
                pops = [pop_frame(i) for i in range(n // 50)]
                rounds.append(await drive(pops, b) * 1e6 / len(pops))
            rows.append({"request": "POP_MESSAGE (32 messages)",
                         "us_per_request": round(statistics.median(rounds), 1),
                         "rounds": [round(x, 1) for x in rounds]})
            rounds = []
            for r in range(ROUNDS):
                reads = ack_frames(b, n // 10)
                rounds.append(await drive(reads, b) * 1e6 / (n // 10))
            rows.append({"request": "ACK_MESSAGE (one message, 64 a read)",
                         "us_per_request": round(statistics.median(rounds), 1),
                         "rounds": [round(x, 1) for x in rounds]})
        finally:
            b.store.close()
    return rows


def native_and_pure(script: str, argv: list[str]) -> None:
    """`script --one argv` in a child process natively, then with LEDGERMQ_PURE=1."""
    for pure in ("0", "1"):
        subprocess.run([sys.executable, script, "--one", *argv],
                       env={**os.environ, "LEDGERMQ_PURE": pure}, check=True)


def on_loop(main: Coroutine[Any, Any, list[dict]]) -> list[dict]:
    """`main` run on uvloop, as the broker runs (asyncio's loop where it is missing)."""
    try:
        import uvloop
        return uvloop.run(main)
    except ImportError:
        return asyncio.run(main)


def micro_main(script: str, bench: str, count: str, default: int,
               measure: Callable[[int, bool], Coroutine[Any, Any, list[dict]]]) -> None:
    """An in-process bench's command line: `--COUNT N` a round, `--profile`; without
    `--one`, itself natively then pure (native_and_pure); with it, JSON rows of `measure`."""
    ap = argparse.ArgumentParser()
    ap.add_argument(f"--{count}", type=int, default=default, help="per round")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--one", action="store_true", help="this implementation only")
    args = ap.parse_args()
    n = getattr(args, count)
    if not args.one:
        native_and_pure(script, [f"--{count}", str(n)] + (["--profile"] if args.profile else []))
        return
    for r in on_loop(measure(n, args.profile)):
        print(json.dumps({"bench": bench, "impl": native.active(), **r}), flush=True)


def main() -> None:
    micro_main(__file__, "request path, in process", "requests", 10000, measure)

if __name__ == "__main__":
    main()
