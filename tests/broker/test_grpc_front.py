"""The gRPC endpoint's front (broker/grpc/front.py) on real sockets: a connection whose
first byte opens a TLS handshake is relayed to the TLS port, any other to the plaintext
port, bytes pass both ways unchanged, and the front's own address at the far end maps
back to the client's until the connection closes."""
import asyncio

from ledgermq.broker.grpc import front as front_module
from ledgermq.broker.grpc.front import RelayFront


class Backend:
    """Stands in for one of grpcio's ports: answers each read with its tag and the bytes,
    and remembers the peer each connection came from."""

    def __init__(self, tag: bytes):
        self.tag, self.peers, self.closed = tag, [], asyncio.Event()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def serve(self, reader, writer):
        host, port = writer.get_extra_info("peername")[:2]
        self.peers.append(f"ipv4:{host}:{port}")
        while data := await reader.read(65536):
            writer.write(self.tag + data)
            await writer.drain()
        writer.close()
        self.closed.set()


async def exchange(port: int, first: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(first)
    answer = await asyncio.wait_for(reader.read(65536), 5)
    return reader, writer, answer


def test_first_byte_picks_the_port_and_the_client_address_is_mapped_back():
    async def run():
        plain, tls = Backend(b"plain:"), Backend(b"tls:")
        front = RelayFront(await plain.start(), await tls.start())
        port = await front.start("127.0.0.1", 0)

        _, w1, a1 = await exchange(port, b"PRI * HTTP/2.0\r\n")
        _, w2, a2 = await exchange(port, b"\x16\x03\x01hello")
        assert (a1, a2) == (b"plain:PRI * HTTP/2.0\r\n", b"tls:\x16\x03\x01hello")
        client_1 = "ipv4:127.0.0.1:%d" % w1.get_extra_info("sockname")[1]
        client_2 = "ipv4:127.0.0.1:%d" % w2.get_extra_info("sockname")[1]
        # the backends saw the front's own ports; the front names the clients behind them
        assert [front.client_of(p) for p in plain.peers + tls.peers] == [client_1, client_2]
        assert front.client_of("ipv4:10.0.0.9:7") == "ipv4:10.0.0.9:7"  # not relayed

        w1.close()  # the client leaves: its far end is closed and its mapping forgotten
        await asyncio.wait_for(plain.closed.wait(), 5)
        deadline = asyncio.get_running_loop().time() + 5
        while front.client_of(plain.peers[0]) != plain.peers[0]:
            assert asyncio.get_running_loop().time() < deadline, "mapping kept after close"
            await asyncio.sleep(0.01)
        w2.close()
        await front.stop()
    asyncio.run(run())


def test_large_transfers_pass_unchanged_both_ways():
    async def run():
        plain = Backend(b"")
        front = RelayFront(await plain.start(), 1)  # (no TLS client here)
        port = await front.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        blob = bytes(range(256)) * 40_000  # 10 MB: past every buffer's high-water mark
        writer.write(blob)
        got = await asyncio.wait_for(reader.readexactly(len(blob)), 30)
        assert got == blob
        writer.close()
        await front.stop()
    asyncio.run(run())


def test_a_client_that_says_nothing_is_closed(monkeypatch):
    monkeypatch.setattr(front_module, "FIRST_BYTE_TIMEOUT_S", 0.2)

    async def run():
        plain = Backend(b"")
        front = RelayFront(await plain.start(), 1)
        port = await front.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the front
        assert plain.peers == []
        writer.close()
        await front.stop()
    asyncio.run(run())


def test_a_backend_that_is_down_closes_the_client():
    async def run():
        plain = Backend(b"")
        gone = await plain.start()
        plain.server.close()
        await plain.server.wait_closed()
        front = RelayFront(gone, gone)
        port = await front.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PRI")
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await front.stop()
    asyncio.run(run())
