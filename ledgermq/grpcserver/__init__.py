"""A gRPC server in Python on asyncio: HTTP/2 (RFC 9113) and gRPC's message framing, for
the broker's RocketMQ 5 endpoint (server.py says why not grpcio's)."""
from .server import Context, GrpcServer, Method, methods_of
from .status import Code, GrpcError

__all__ = ["Context", "GrpcServer", "Method", "methods_of", "Code", "GrpcError"]
