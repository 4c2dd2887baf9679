"""The gRPC server on the broker's event loop (grpc.aio): started when grpcServerPort is
set, stopped with the broker. TLS as RocketMQ's proxy: enforcing serves TLS only, with the
broker's certificate; permissive takes TLS and plaintext on the one port; disabled takes
both too, TLS with a self-signed certificate made at start, while tlsTestModeEnable holds
(true by default: RocketMQ 5's clients default to TLS), else plaintext only. grpcio cannot
take both on one port: a front relays each connection to one of its two (front.py)."""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from ...apis import rpc
from ...remoting.tls import ServerFiles, TlsMode
from .front import RelayFront
from .messaging import MessagingService

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

GRACE_S = 1.0  # calls in progress get this long when the broker stops
MAX_MESSAGE_BYTES = 64 << 20


class GrpcEndpoint:
    def __init__(self, broker: Broker):
        self.service = MessagingService(broker)
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None
        self.front: RelayFront | None = None
        self.renewing: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
            # calls one client connection may have open at once (HTTP/2 streams): more wait
            ("grpc.max_concurrent_streams",
             self.service.broker.config.grpcMaxConcurrentStreamsPerConnection)])
        rpc.add_to_server(self.service, self.server)
        config = self.service.broker.config
        tls = config.tls
        if tls.mode is TlsMode.ENFORCING:
            assert tls.server_files is not None  # (load_tls reads them for a TLS server)
            self.port = self._listen(host, port, credentials(tls.server_files))
        elif tls.mode is TlsMode.DISABLED and not config.tlsTestModeEnable:
            self.port = self._listen(host, port, None)
        else:  # both on one port: grpcio on two loopback ports, the front on the public one
            if tls.mode is TlsMode.PERMISSIVE:
                assert tls.server_files is not None
                secure = credentials(tls.server_files)
            else:
                log.info("gRPC endpoint: TLS with a self-signed certificate and plaintext "
                         "(tlsTestModeEnable=true, as RocketMQ's proxy)")
                secure = self_signed()
            self.front = RelayFront(self._listen("127.0.0.1", 0, None),
                                    self._listen("127.0.0.1", 0, secure))
        await self.server.start()
        self.renewing = asyncio.create_task(self.service.renewal.run())
        if self.front is not None:
            self.port = await self.front.start(host, port)
        assert self.port is not None
        return self.port

    def _listen(self, host: str, port: int, secure: grpc.ServerCredentials | None) -> int:
        assert self.server is not None
        address = f"{host}:{port}"
        bound: int = self.server.add_secure_port(address, secure) if secure is not None \
            else self.server.add_insecure_port(address)
        if not bound:
            raise OSError(f"gRPC endpoint: cannot listen on {address}")
        return bound

    def client_of(self, peer: str) -> str:
        """A call's peer as grpcio names it -> the client's address (see front.py)."""
        return self.front.client_of(peer) if self.front is not None else peer

    async def stop(self) -> None:
        if self.renewing is not None:
            self.renewing.cancel()
        for ch in list(self.service.channels.values()):
            ch.close()
        if self.front is not None:
            await self.front.stop()
        if self.server is not None:
            await self.server.stop(GRACE_S)


def credentials(files: ServerFiles) -> grpc.ServerCredentials:
    """The broker's certificate and key for gRPC (which wants PEM bytes, the key
    unencrypted: a keyPassword is applied here, in memory)."""
    key = files.key.read_bytes()
    if files.key_password:
        from cryptography.hazmat.primitives import serialization
        key = serialization.load_pem_private_key(key, files.key_password.encode()) \
            .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())
    trust = files.trust.read_bytes() if files.trust else None
    return grpc.ssl_server_credentials([(key, files.cert.read_bytes())],
                                       root_certificates=trust,
                                       require_client_auth=files.client_auth == "require")


def self_signed() -> grpc.ServerCredentials:
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
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return grpc.ssl_server_credentials([(pem_key, cert.public_bytes(serialization.Encoding.PEM))])
