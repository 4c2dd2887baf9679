"""The gRPC server on the broker's event loop (grpc.aio): started when grpcServerPort is
set, stopped with the broker."""
from __future__ import annotations

import logging

import grpc

from ...apis import rpc
from .service import MessagingService

log = logging.getLogger(__name__)

GRACE_S = 1.0  # calls in progress get this long when the broker stops
MAX_MESSAGE_BYTES = 64 << 20


class GrpcEndpoint:
    def __init__(self, broker):
        self.service = MessagingService(broker)
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0)])
        rpc.add_to_server(self.service, self.server)
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
