"""Zero-copy reads (#21): pulled messages, DLedger and classic-HA pushes leave the mapped commit log for
the socket as views (writev), never copied into Python bytes on the way; and a node that
cuts its log first drops pushes still waiting in a socket buffer, since their views would
show the bytes written there next."""
import asyncio
import mmap
import os
import socket
import tracemalloc

import pytest
import uvloop

from ledgermq.broker.broker import Broker
from ledgermq.broker.config import load_broker_config
from ledgermq.broker.meta.topic_table import TopicConfig
from ledgermq.localcluster.cluster import free_ports
from ledgermq.drivers.raft import encode_message
from ledgermq.remoting import RemotingCommand, RequestCode, ResponseCode
from ledgermq.remoting.command import decode_frame
from ledgermq.replication.ha.actions import HEADER
from ledgermq.replication.raft import Code, Push, PushType

from ..wait import until
from .test_dledger_driver import append, start_group, stop_group
from .test_ha_drivers import fill, master_and_slave, open_store

BODY = 2048
COUNT = 2000  # ~4.3 MB pulled in one response


def _recv_frame(sock: socket.socket, buf: bytearray) -> memoryview:
    """One remoting frame read into `buf` (no per-read allocation)."""
    view, got = memoryview(buf), 0
    while got < 4 or got < 4 + int.from_bytes(buf[:4], "big"):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("broker closed the connection")
        got += n
    return view[4:got]


@pytest.mark.timeout(60)
def test_a_pull_sends_the_mapped_log_without_copying_it(tmp_path):
    """4.3 MB pulled in one response: the broker allocates a small fraction of it while
    serving (a copy of the body on the way to the socket would allocate all of it)."""
    async def run():
        port = free_ports(1)[0]
        bcfg, scfg, _ = load_broker_config(None, {
            "brokerName": "zc", "listenPort": str(port), "namesrvAddr": "127.0.0.1:1",
            "storePathRootDir": str(tmp_path / "b")})
        broker = Broker(bcfg, scfg)
        await broker.start()
        try:
            broker.topics.create(TopicConfig("ZeroCopy", 1, 1))
            for _ in range(0, COUNT, 100):
                assert broker.store.append(broker.store.encode(
                    "ZeroCopy", 0, [os.urandom(BODY) for _ in range(100)])).ok
            await until(lambda: broker.store.max_offset_in_queue("ZeroCopy", 0) == COUNT,
                        "the messages dispatched")
            request = RemotingCommand(RequestCode.PULL_MESSAGE, ext={
                "consumerGroup": "zc-g", "topic": "ZeroCopy", "queueId": "0",
                "queueOffset": "0", "maxMsgNums": str(COUNT), "sysFlag": "0",
                "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                "subVersion": "0"}).to_bytes()
            buf = bytearray(8 << 20)
            with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
                def pull() -> memoryview:
                    sock.sendall(request)
                    return _recv_frame(sock, buf)
                await asyncio.to_thread(pull)  # warm: connection state, caches
                tracemalloc.start()
                try:
                    before = tracemalloc.get_traced_memory()[0]
                    frame = await asyncio.to_thread(pull)
                    peak = tracemalloc.get_traced_memory()[1] - before
                finally:
                    tracemalloc.stop()
            resp = decode_frame(frame)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert len(resp.body) > COUNT * BODY
            assert peak < len(resp.body) // 8, (
                f"serving a {len(resp.body)}-byte pull allocated {peak} bytes")
        finally:
            await broker.stop()
    uvloop.run(run())  # as `ledgermq broker` runs (asyncio's own writelines joins buffers)


def _spy_pushes(driver, sent: list) -> None:
    """Record the buffers of every push the driver sends (the send itself still happens)."""
    real = driver._send

    def spy(msg):
        if isinstance(msg, Push) and msg.kind is PushType.APPEND and msg.entries:
            sent.append(encode_message(msg).encode())
        real(msg)
    driver._send = spy


@pytest.mark.timeout(60)
def test_a_dledger_push_carries_views_on_the_leaders_log(tmp_path):
    async def run():
        drivers, leader = await start_group(tmp_path, segment=4 << 20)
        try:
            sent: list = []
            _spy_pushes(leader, sent)
            futs = [leader.propose_range(*append(leader.store, n)) for n in range(200)]
            done = await asyncio.wait_for(asyncio.gather(*futs), 10)
            assert {d.code for d in done} == {Code.SUCCESS}
            assert sent, "the leader pushed the entry"
            big = [b for frame in sent for b in frame[2:] if len(b) > 64]  # after the header
            assert big and all(type(b) is memoryview and isinstance(b.obj, mmap.mmap)
                               for b in big), [type(b).__name__ for b in big]
            pushed = sum(len(b) for b in big)
            assert pushed >= sum(50 + n for n in range(200))  # every message body went out
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(60)
def test_cutting_the_log_first_drops_pushes_still_in_a_socket_buffer(tmp_path):
    """A former leader's push that waits in a socket buffer (its follower stopped reading)
    is dropped, link and all, before the log under its views is cut; a link with nothing
    waiting stays open. Raft sends again whatever a follower then misses."""
    async def run():
        drivers, leader = await start_group(tmp_path)
        try:
            follower = next(d for d in drivers if d is not leader)
            conns = {n: leader.client.open_connection(a) for n, a in leader.peers.items()
                     if n != leader.self_id}
            stuck, other = conns[follower.self_id], next(
                c for n, c in conns.items() if n != follower.self_id)
            await follower.server.stop()  # nobody reads that link any more...
            sock = stuck.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            view = memoryview(bytes(1 << 20))
            for _ in range(256):  # ...so writes pile up (a few MB fill the socket's buffers)
                if stuck.transport.get_write_buffer_size():
                    break
                stuck.transport.write(view)
                await asyncio.sleep(0)
            assert stuck.transport.get_write_buffer_size(), "256 MB went out unread"
            leader._drop_unsent_pushes()
            assert not stuck.is_open and other.is_open
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(60)
def test_a_classic_ha_push_writes_views_on_the_masters_log(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")

    async def scenario():
        async with master_and_slave(master, slave) as (m, _):
            await until(lambda: m.writers, "the slave connected")
            written = []
            for w in m.writers.values():
                real, real_lines = w.write, w.writelines
                w.write = lambda data, real=real: (written.append(data), real(data))
                w.writelines = lambda parts, real=real_lines: (written.extend(parts),
                                                               real(parts))
            fill(master, 100)
            m.appended()
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the slave follows")
            views = [b for b in written if type(b) is memoryview and isinstance(b.obj, mmap.mmap)]
            assert sum(map(len, views)) == master.commitlog.max_offset
            others = [b for b in written if type(b) is not memoryview]
            assert {len(b) for b in others} <= {HEADER.size}  # headers, no copied bytes
    uvloop.run(scenario())
    master.close()
    slave.close()
