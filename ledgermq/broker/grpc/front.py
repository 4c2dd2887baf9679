"""One public port for TLS and plaintext gRPC clients.

grpcio serves a port as TLS or as plaintext, never both; RocketMQ's proxy takes both on its
one port, and RocketMQ 5's clients default to TLS (the Java client's `enableSsl(true)`, the
Go client always) while others speak plaintext. So where the endpoint must take both,
grpcio listens on two loopback ports of its own, one each way, and this front owns the
public port: a connection's first byte (0x16 opens a TLS handshake) picks the port its bytes
are relayed to, unchanged (TLS stays grpcio's). The front's own address at grpcio is
mapped back to the client's, so ACL's address rules and connection lists see the client.
"""
from __future__ import annotations

import asyncio
import logging
from typing import cast

from ...remoting.tls import TLS_RECORD_HANDSHAKE

log = logging.getLogger(__name__)

FIRST_BYTE_TIMEOUT_S = 10.0  # a gRPC client speaks first (a ClientHello or the preface)


def peer_name(addr: tuple[str, int]) -> str:
    """A socket address as grpcio's context.peer() writes it."""
    host, port = addr[0], addr[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class RelayFront:
    """The public listener: relays each connection to grpcio's plaintext or TLS port."""

    def __init__(self, plain_port: int, tls_port: int):
        self.ports = {False: plain_port, True: tls_port}
        self.peers: dict[int, str] = {}  # the front's port at grpcio -> the client's peer
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _ClientSide(self), host, port,
                                               reuse_address=True)
        bound: int = self.server.sockets[0].getsockname()[1]
        return bound

    def client_of(self, peer: str) -> str:
        """grpcio's peer string for a call -> the client's (a relayed call's peer is the
        front's own loopback address)."""
        port = peer.rsplit(":", 1)[-1]
        return self.peers.get(int(port), peer) if port.isdigit() else peer

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class _Side(asyncio.Protocol):
    """One end of a relayed connection; `other` is the far end. A side whose far end
    cannot keep up stops reading until it drains (asyncio's write flow control)."""

    transport: asyncio.Transport
    other: _Side | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's: not a subclass)

    def data_received(self, data: bytes) -> None:
        assert self.other is not None  # (a client side reads nothing before it has one)
        self.other.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.other is not None:
            self.other.transport.close()  # after what it still has to write

    def pause_writing(self) -> None:
        if self.other is not None and not self.other.transport.is_closing():
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and not self.other.transport.is_closing():
            self.other.transport.resume_reading()


class _ClientSide(_Side):
    def __init__(self, front: RelayFront):
        self.front = front
        self.first: bytes | None = None
        self.opening: asyncio.Task[None] | None = None
        self.silence: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peer = peer_name(transport.get_extra_info("peername"))
        self.silence = asyncio.get_running_loop().call_later(
            FIRST_BYTE_TIMEOUT_S, transport.close)

    def data_received(self, data: bytes) -> None:
        if self.other is not None:
            self.other.transport.write(data)
            return
        assert self.silence is not None
        self.silence.cancel()
        self.first = data  # read no more until grpcio's side is open
        self.transport.pause_reading()
        self.opening = asyncio.ensure_future(self._open(data[0] == TLS_RECORD_HANDSHAKE))

    async def _open(self, tls: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, upstream = await loop.create_connection(
                lambda: _GrpcSide(self), "127.0.0.1", self.front.ports[tls])
        except OSError as e:
            log.warning("gRPC endpoint: cannot relay %s to grpcio: %s", self.peer, e)
            self.transport.close()
            return
        if self.transport.is_closing():  # the client left while we connected
            transport.close()
            return
        port = transport.get_extra_info("sockname")[1]
        self.front.peers[port] = self.peer
        upstream.port = port
        self.other = upstream
        assert self.first is not None
        transport.write(self.first)
        self.first = None
        self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.silence is not None:
            self.silence.cancel()
        if self.opening is not None and not self.opening.done():
            self.opening.cancel()
        super().connection_lost(exc)


class _GrpcSide(_Side):
    port = 0

    def __init__(self, client: _ClientSide):
        self.other = client
        self.front = client.front

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.peers.pop(self.port, None)
        super().connection_lost(exc)
