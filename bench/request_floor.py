"""The floor under one message per request (#32): a Python server that answers every request
at once and stores nothing, on uvloop, as ledgermq's broker runs. What RocketMQ's C++ client
achieves against it is what any Python broker on this machine could reach at best with that
client; ledgermq's figures beside it are the floor plus the broker's own work (parsing,
checks, the append, the queue entry and index, the response's fields).

It parses only what an answer needs (the frame's length, the header's opaque) and answers a
SEND with a SEND_OK whose fields the client reads (msgId, queueId, queueOffset), anything
else with SUCCESS. A name server (ledgermq's, in the same process: a route lookup every 30 s)
lists it as the master of the benchmark topic's broker.

    python bench/request_floor.py    # prints {"namesrv": ..., "broker": ...}, serves until
                                     # SIGTERM or SIGINT
`request_bench.py --systems floor` starts and stops it (FloorSide).
"""
from __future__ import annotations

import asyncio
import json
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import orjson
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledgermq.namesrv.server import NamesrvConfig, NameServer  # noqa: E402

TOPIC = "BenchRequests"
SEND_CODES = (10, 310)  # SEND_MESSAGE, SEND_MESSAGE_V2
_WORD = struct.Struct(">I")
_BINARY_OPAQUE = struct.Struct(">i")  # RocketMQ's binary header: code 2, language 1,
BINARY_OPAQUE_AT = 5  # version 2, then the opaque


def answer(code: int, opaque: int, offset: int) -> bytes:
    """A response frame (JSON header, as the C++ client sends its requests)."""
    head = {"code": 0, "flag": 1, "language": "JAVA", "opaque": opaque, "version": 0,
            "serializeTypeCurrentRPC": "JSON"}
    if code in SEND_CODES:
        head["extFields"] = {"msgId": f"7F00000100002A9F{offset:016X}", "queueId": "0",
                             "queueOffset": str(offset), "MSG_REGION": "DefaultRegion",
                             "TRACE_ON": "true"}
    raw = orjson.dumps(head)
    return _WORD.pack(4 + len(raw)) + _WORD.pack(len(raw)) + raw


class Answering(asyncio.Protocol):
    """Every whole frame read is answered, the answers of one read in one write."""

    sent = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out, pos = [], 0
        while len(buf) - pos >= 8:
            size = _WORD.unpack_from(buf, pos)[0]
            if len(buf) - pos < 4 + size:
                break
            word = _WORD.unpack_from(buf, pos + 4)[0]
            head = buf[pos + 8:pos + 8 + (word & 0xFFFFFF)]
            if word >> 24:  # RocketMQ's binary header
                code = int.from_bytes(head[:2], "big", signed=True)
                opaque = _BINARY_OPAQUE.unpack_from(head, BINARY_OPAQUE_AT)[0]
            else:
                doc = orjson.loads(head)
                code, opaque = doc.get("code", 0), doc.get("opaque", 0)
            Answering.sent += code in SEND_CODES
            out.append(answer(code, opaque, Answering.sent))
            pos += 4 + size
        self.buf = buf[pos:]
        if out:
            self.transport.write(b"".join(out))


async def serve() -> None:
    names = NameServer(NamesrvConfig(listenPort=0))
    await names.start()
    server = await asyncio.get_running_loop().create_server(Answering, "127.0.0.1", 0)
    broker = "127.0.0.1:%d" % server.sockets[0].getsockname()[1]
    names.routes.expire_after_s = 1e9  # (it sends no heartbeat)
    names.routes.register(cluster="FloorCluster", broker_name="floor-broker",
                          broker_addr=broker, broker_id=0, ha_server_addr="",
                          topics={TOPIC: {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
                          data_version={}, now=time.monotonic())
    print(json.dumps({"namesrv": names.address, "broker": broker}), flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    await names.stop()


class FloorSide:
    """request_bench's face of the floor: its name server and its one process."""

    system = "floor"

    def __init__(self, layout: str, d: Path) -> None:
        if layout != "single":
            raise ValueError("the floor has only the single layout")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.close()
            raise RuntimeError("the floor server did not start")
        self.namesrv = json.loads(line)["namesrv"]

    def pids(self) -> dict[str, int]:
        return {"floor": self.proc.pid}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    uvloop.run(serve())
