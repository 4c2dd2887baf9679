"""The gRPC endpoint on the broker's event loop (ledgermq/grpcserver): started when
grpcServerPort is set, stopped with the broker. TLS as RocketMQ's proxy: enforcing serves
TLS only, with the broker's certificate; permissive takes TLS and plaintext on the one port;
disabled takes both too, TLS with a self-signed certificate made at start, while
tlsTestModeEnable holds (true by default: RocketMQ 5's clients default to TLS), else
plaintext only. A connection's first byte tells TLS from plaintext (remoting/listen.py)."""
from __future__ import annotations

import asyncio
import logging
import ssl
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...apis import rpc
from ...grpcserver import GrpcServer, methods_of
from ...remoting.listen import listen
from ...remoting.tls import CLIENT_AUTH, ServerFiles, Tls, TlsMode
from .messaging import MessagingService

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

GRACE_S = 1.0  # calls in progress get this long when the broker stops
MAX_MESSAGE_BYTES = 64 << 20


class GrpcEndpoint:
    def __init__(self, broker: Broker):
        self.service = MessagingService(broker)
        self.server: GrpcServer | None = None
        self.listener: Any = None  # an asyncio server or a SniffingServer (listen.py)
        self.port: int | None = None
        self.renewing: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> int:
        config = self.service.broker.config
        self.server = GrpcServer(
            methods_of(rpc.SERVICE, self.service), max_message=MAX_MESSAGE_BYTES,
            # calls one client connection may have open at once (HTTP/2 streams)
            max_streams=config.grpcMaxConcurrentStreamsPerConnection)
        tls = config.tls
        if tls.mode is not TlsMode.DISABLED:
            assert tls.server_files is not None  # (load_tls reads them for a TLS server)
            grpc_tls = replace(tls, server=h2_context(tls.server_files))
        elif config.tlsTestModeEnable:
            log.info("gRPC endpoint: TLS with a self-signed certificate and plaintext "
                     "(tlsTestModeEnable=true, as RocketMQ's proxy)")
            grpc_tls = Tls(mode=TlsMode.PERMISSIVE, server=self_signed())
        else:
            grpc_tls = tls
        self.listener = listener = await listen(self.server.protocol, host, port, grpc_tls,
                                                what="gRPC endpoint")
        self.port = listener.sockets[0].getsockname()[1]
        self.renewing = asyncio.create_task(self.service.renewal.run())
        return self.port

    async def stop(self) -> None:
        if self.renewing is not None:
            self.renewing.cancel()
        for ch in list(self.service.channels.values()):
            ch.close()
        if self.listener is not None:
            self.listener.close()
            await self.listener.wait_closed()
        if self.server is not None:
            await self.server.stop(GRACE_S)


def h2_context(files: ServerFiles) -> ssl.SSLContext:
    """The broker's certificate for gRPC: its own context, offering HTTP/2 by ALPN (gRPC
    clients refuse a TLS connection that does not select "h2")."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(files.cert, files.key, files.key_password)
    if files.trust is not None:
        ctx.load_verify_locations(files.trust)
    ctx.verify_mode = CLIENT_AUTH[files.client_auth]
    ctx.set_alpn_protocols(["h2"])
    return ctx


def self_signed() -> ssl.SSLContext:
    """A certificate made for this run (EC P-256, a year), as RocketMQ's proxy makes one in
    its TLS test mode: RocketMQ 5's clients do not verify the endpoint's certificate."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ledgermq")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as d:  # (ssl loads a chain from files only)
        pem = Path(d) / "self-signed.pem"
        pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        ctx.load_cert_chain(pem)
    ctx.set_alpn_protocols(["h2"])
    return ctx
