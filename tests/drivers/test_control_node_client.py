"""The checkpoint-mode broker's control-node link when the control node is down: each send
it tries to cache fails at once and says so, but the log gets one warning for a burst (it
was one line per send: 134 lines in a second of a chaos run), with the count."""
import asyncio
import logging
import socket

from ledgermq.drivers.control_node import ControlNodeClient
from ledgermq.replication.checkpoint import Resolution


def _closed_port() -> int:
    with socket.socket() as s:  # bound and closed at once: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_down_control_node_is_one_warning_per_burst_and_an_unknown_resolution(caplog):
    async def go():
        client = ControlNodeClient(f"127.0.0.1:{_closed_port()}", "broker-a")
        try:
            cached = [await client.cache(1, i * 100, i * 100 + 100, f"1-{i}", b"m")
                      for i in range(20)]
            return cached, await client.resolve(1, 100, "1-0", 0.5)
        finally:
            await client.close()
    with caplog.at_level(logging.WARNING, logger="ledgermq.drivers.control_node"):
        cached, resolution = asyncio.run(go())
    assert cached == [False] * 20
    assert resolution is Resolution.UNKNOWN
    warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1, warnings
