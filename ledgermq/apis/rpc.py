"""The MessagingService's calls, read from its descriptor: a server registers a servicer's
methods (a method the servicer lacks answers UNIMPLEMENTED), a client gets a stub with one
callable per method. (grpcio-tools' generated module does the same in some 650 lines.)"""
from __future__ import annotations

import grpc
from google.protobuf import message_factory

from . import service_pb2

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]


def _kind(method) -> str:
    """unary_unary, unary_stream, stream_unary or stream_stream."""
    return (("stream" if method.client_streaming else "unary") + "_" +
            ("stream" if method.server_streaming else "unary"))


def _types(method):
    return (message_factory.GetMessageClass(method.input_type),
            message_factory.GetMessageClass(method.output_type))


def add_to_server(servicer, server) -> None:
    handlers = {}
    for m in SERVICE.methods:
        fn = getattr(servicer, m.name, None)
        if fn is None:
            continue
        request, response = _types(m)
        make = getattr(grpc, f"{_kind(m)}_rpc_method_handler")
        handlers[m.name] = make(fn, request_deserializer=request.FromString,
                                response_serializer=response.SerializeToString)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))


class Stub:
    """`Stub(channel).SendMessage(request, metadata=..., timeout=...)`, and so on."""

    def __init__(self, channel):
        for m in SERVICE.methods:
            request, response = _types(m)
            setattr(self, m.name, getattr(channel, _kind(m))(
                f"/{SERVICE.full_name}/{m.name}", request_serializer=request.SerializeToString,
                response_deserializer=response.FromString))
