"""Listening with TLS settings: plain `create_server` when TLS is off, else an accept
loop that looks at each connection's first byte before choosing its transport.

A TLS client speaks first with a handshake record (0x16); every ledgermq protocol's
client speaks first too (a remoting frame, an HA slave's report), and neither frame can
start with 0x16 in practice (a frame length over 369 MB; an HA offset past 1.5 EB). So one
peeked byte tells TLS from plaintext: permissive serves both on one port, enforcing
closes plaintext with a log line saying why (a handshake failure would tell the peer
nothing useful and the operator less). The protocol object and its hot path are the same
either way: only the transport under it differs.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Callable

from .tls import TLS_RECORD_HANDSHAKE, Tls, TlsMode

log = logging.getLogger(__name__)

FIRST_BYTE_TIMEOUT_S = 10.0  # a client that connects says something first
HANDSHAKE_TIMEOUT_S = 10.0


async def listen(factory: Callable[[], asyncio.BaseProtocol], host: str, port: int,
                 tls: Tls, *, what: str = "server"):
    """An asyncio.Server (TLS disabled) or a SniffingServer: both have `sockets`,
    `close()` and `wait_closed()`. `what` names the listener in log lines."""
    loop = asyncio.get_running_loop()
    if not tls.serves_tls:
        return await loop.create_server(factory, host, port, reuse_address=True)
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.create_server((host, port), family=family, backlog=1024)
    sock.setblocking(False)
    server = SniffingServer(factory, sock, tls, what)
    server.start()
    return server


class SniffingServer:
    def __init__(self, factory: Callable[[], asyncio.BaseProtocol], sock: socket.socket,
                 tls: Tls, what: str):
        self.factory, self.tls, self.what = factory, tls, what
        self.sockets = [sock]
        self._accepting: asyncio.Task | None = None
        self._sniffing: set[asyncio.Task] = set()

    def start(self) -> None:
        self._accepting = asyncio.create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        listener = self.sockets[0]
        while True:
            try:
                conn, addr = await loop.sock_accept(listener)
            except OSError as e:  # out of file descriptors: back off, keep serving
                log.warning("%s: accept failed: %s", self.what, e)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            task = asyncio.create_task(self._sniff(conn, addr))
            self._sniffing.add(task)
            task.add_done_callback(self._sniffing.discard)

    async def _sniff(self, conn: socket.socket, addr) -> None:
        peer = f"{addr[0]}:{addr[1]}"
        loop = asyncio.get_running_loop()
        try:
            first = await _first_byte(loop, conn)
            if first is None:
                conn.close()  # gone (or silent) before saying anything
                return
            is_tls = first == TLS_RECORD_HANDSHAKE
            if not is_tls and self.tls.mode is TlsMode.ENFORCING:
                log.warning("%s: closing plaintext connection from %s: "
                            "tls.server.mode=enforcing accepts TLS only", self.what, peer)
                conn.close()
                return
            await loop.connect_accepted_socket(
                self.factory, conn, ssl=self.tls.server if is_tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if is_tls else None)
        except asyncio.CancelledError:
            conn.close()
            raise
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as e:
            log.warning("%s: TLS handshake with %s failed: %s", self.what, peer,
                        e or type(e).__name__)
            conn.close()

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._sniffing):
            task.cancel()
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        tasks = [t for t in (self._accepting, *self._sniffing) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)


async def _first_byte(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> int | None:
    """The connection's first byte, left in the socket; None if it closes or stays
    silent for FIRST_BYTE_TIMEOUT_S."""
    deadline = loop.time() + FIRST_BYTE_TIMEOUT_S
    while True:
        readable = loop.create_future()
        loop.add_reader(conn.fileno(), lambda f=readable: f.done() or f.set_result(None))
        try:
            await asyncio.wait_for(readable, max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            return None
        finally:
            loop.remove_reader(conn.fileno())
        try:
            head = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue  # a spurious wake-up
        return head[0] if head else None
