"""The cluster-secret handshake on the HA port (ledgermq/peer_auth/core.py), before any
replication byte, when the broker has a clusterSecret:

  slave -> master: MAGIC (8), the slave's nonce (16)
  master -> slave: MAGIC (8), the master's nonce (16), the master's proof (32)
  slave -> master: the slave's proof (32)

No replication message starts with MAGIC (a report's offset and a handshake's kind are
never negative), so whichever side has no secret recognizes the other's handshake and
both say what is wrong rather than misreading each other's bytes. Without a secret the
wire is as before.
"""
from __future__ import annotations

import asyncio

from .core import (
    HANDSHAKE_TIMEOUT_S, INCOMPLETE, NO_AUTH, NONCE_BYTES, PROOF_BYTES, UNEXPECTED, WRONG_SECRET,
    ClientHandshake, PeerRefused, ServerHandshake,
)

MAGIC = b"\xffLMQAUTH"
FIRST = len(MAGIC)  # every slave's first replication message is at least this long
SECRET_HINT = "set clusterSecret (or clusterSecretFile) the same on every server"


async def admit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                secret: str) -> bytes:
    """The master's side: PeerRefused unless the slave may replicate. Returns the bytes
    of the slave's first replication message already read (b"" after a handshake)."""
    try:
        return await asyncio.wait_for(_admit(reader, writer, secret), HANDSHAKE_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise PeerRefused(INCOMPLETE, f"sent nothing within {HANDSHAKE_TIMEOUT_S:g} s"
                          if secret else "sent nothing") from None
    except asyncio.IncompleteReadError:
        raise PeerRefused(INCOMPLETE, "closed the link during authentication") from None


async def _admit(reader, writer, secret: str) -> bytes:
    first = await reader.readexactly(FIRST)
    if not secret:
        if first == MAGIC:
            raise PeerRefused(UNEXPECTED, "it authenticates with a cluster secret and this "
                                          f"broker has none: {SECRET_HINT}")
        return first
    if first != MAGIC:
        raise PeerRefused(NO_AUTH, "sent no authentication (this broker requires the "
                                   f"cluster secret): {SECRET_HINT}")
    hs = ServerHandshake(secret)
    nonce, ours = hs.challenge(await reader.readexactly(NONCE_BYTES))
    writer.write(MAGIC + nonce + ours)
    hs.check(await reader.readexactly(PROOF_BYTES))
    return b""


async def connect(addr: str, secret: str, timeout: float = 3.0, ssl_context=None
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The slave's side: a connection to the master at `addr` (TLS with `ssl_context`),
    authenticated when we have a secret (PeerRefused, the link closed, if the master does
    not prove it knows it)."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, int(port), ssl=ssl_context), timeout)
    if not secret:
        return reader, writer
    try:
        await asyncio.wait_for(_prove(reader, writer, secret), HANDSHAKE_TIMEOUT_S)
    except asyncio.TimeoutError:
        writer.close()
        raise PeerRefused(INCOMPLETE, f"did not answer our authentication within "
                                      f"{HANDSHAKE_TIMEOUT_S:g} s") from None
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _prove(reader, writer, secret: str) -> None:
    hs = ClientHandshake(secret)
    writer.write(MAGIC + hs.hello())
    try:
        reply = await reader.readexactly(FIRST + NONCE_BYTES + PROOF_BYTES)
    except asyncio.IncompleteReadError:
        raise PeerRefused(INCOMPLETE, "closed the link during authentication (it has no "
                                      f"cluster secret, or refused ours): {SECRET_HINT}"
                          ) from None
    if reply[:FIRST] != MAGIC:
        raise PeerRefused(NO_AUTH, f"answered without authenticating: {SECRET_HINT}")
    ours, why = hs.answer(reply[FIRST:FIRST + NONCE_BYTES], reply[FIRST + NONCE_BYTES:])
    writer.write(ours)  # even when it failed: the master then logs why as well
    if why is not None:
        raise PeerRefused(WRONG_SECRET, why)
