"""The gRPC server on the broker's event loop (grpc.aio): started when grpcServerPort is
set, stopped with the broker. With tls.server.mode=enforcing it serves TLS only, with the
broker's certificate; gRPC cannot tell TLS from plaintext on one port, so under
permissive it stays plaintext (and says so)."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc

from ...apis import rpc
from ...remoting.tls import ServerFiles, TlsMode
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

    async def start(self, host: str, port: int) -> int:
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
            # calls one client connection may have open at once (HTTP/2 streams): more wait
            ("grpc.max_concurrent_streams",
             self.service.broker.config.grpcMaxConcurrentStreamsPerConnection)])
        rpc.add_to_server(self.service, self.server)
        tls = self.service.broker.config.tls
        if tls.mode is TlsMode.ENFORCING:
            assert tls.server_files is not None  # (load_tls reads them for a TLS server)
            self.port = self.server.add_secure_port(f"{host}:{port}",
                                                    credentials(tls.server_files))
        else:
            if tls.mode is TlsMode.PERMISSIVE:
                log.warning("gRPC endpoint: plaintext (tls.server.mode=permissive; gRPC "
                            "serves TLS only under enforcing)")
            self.port = self.server.add_insecure_port(f"{host}:{port}")
        if not self.port:
            raise OSError(f"gRPC endpoint: cannot listen on {host}:{port}")
        await self.server.start()
        return self.port

    async def stop(self) -> None:
        for ch in list(self.service.channels.values()):
            ch.close()
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
