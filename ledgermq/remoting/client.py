"""The client side of remoting: connections to many servers, one per address, opened on
first use and again after one closes."""
from __future__ import annotations

import asyncio
import ssl
import time
from typing import Awaitable, Callable

from .command import MAX_FRAME_DEFAULT, RemotingCommand
from .transport import Connection, Handler, RemotingError


def split_address(addr: str) -> tuple[str, int]:
    """(host, port) of "host:port"; RemotingError saying what was expected otherwise."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RemotingError(f"{addr!r} is not an address: expected host:port "
                            "(e.g. 127.0.0.1:9876)")
    return host, int(port)


class RemotingClient:
    """Connections to many servers, one per address, reused and re-opened as needed."""

    def __init__(self, handler: Handler | None = None, *, connect_timeout: float = 3.0,
                 max_frame: int = MAX_FRAME_DEFAULT,
                 signer: Callable[[RemotingCommand], None] | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 authenticate: Callable[[Connection], Awaitable[None]] | None = None,
                 drop_silent: bool = False):
        """`ssl_context`: connect with TLS (verifying servers as it says); None: plaintext.
        `drop_silent`: see Connection."""
        self.handler = handler
        self.drop_silent = drop_silent
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.signer = signer  # signs every request (ACL credentials), if given
        # proves us to the server on each new connection before it is used (peer_auth.py);
        # raises RemotingError when either side fails
        self.authenticate = authenticate
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}

    async def connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            host, port = split_address(addr)
            loop = asyncio.get_running_loop()
            try:
                _, conn = await asyncio.wait_for(loop.create_connection(
                    lambda: Connection(self.handler, max_frame=self.max_frame,
                                       drop_silent=self.drop_silent), host,
                    port, ssl=self.ssl_context), self.connect_timeout)
            except ssl.SSLCertVerificationError as e:
                raise RemotingError(f"cannot connect to {addr}: TLS: {e.verify_message} (is "
                                    "the CA that signed its certificate the one trusted here: "
                                    "tls.client.trustCertPath / LEDGERMQ_TLS_CA?)") from None
            except (OSError, asyncio.TimeoutError, ValueError) as e:
                tls_hint = " (TLS handshake: is the server serving TLS?)" \
                    if isinstance(e, ssl.SSLError) else ""
                raise RemotingError(f"cannot connect to {addr}: {e or 'timeout'}{tls_hint}"
                                    ) from None
            conn.signer = self.signer
            if self.ssl_context is None:
                conn.silent_close_hint = (" before answering (a server with tls.server.mode="
                                          "enforcing closes plaintext: connect with TLS)")
            if self.authenticate is not None:
                try:
                    await self.authenticate(conn)
                except BaseException:
                    conn.close()
                    raise
            self._conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
                fut.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            self._connecting.pop(addr, None)

    def open_connection(self, addr: str) -> Connection | None:
        """The open connection to `addr`, if there is one (no connecting)."""
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

    async def invoke(self, addr: str, cmd: RemotingCommand,
                     timeout: float = 3.0) -> RemotingCommand:
        conn = await self.connection(addr)
        return await conn.request(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        (await self.connection(addr)).oneway(cmd)

    def silent(self, silent_s: float) -> list[str]:
        """Addresses whose connection owes answers and has sent nothing for `silent_s`: the
        server hung, paused or was cut off (or holds a long poll)."""
        now = time.monotonic()
        return [a for a, c in self._conns.items()
                if c.pending and c.is_open and now - c.last_active >= silent_s]

    def abort(self, addr: str) -> None:
        """Drop the connection to `addr` at once: the requests waiting on it fail now."""
        conn = self._conns.pop(addr, None)
        if conn is not None and conn.transport is not None:
            conn.transport.abort()

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        for c in conns:
            try:
                await asyncio.wait_for(asyncio.shield(c.closed), 1)
            except asyncio.TimeoutError:
                pass
