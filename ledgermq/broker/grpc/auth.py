"""ACL for RocketMQ 5 clients: each call's `authorization` metadata (HMAC-SHA1 of its
x-mq-date-time keyed by the account's secret) names an account of plain_acl.yml; what it
may do is decided by the same rules as for remoting clients (broker/access/accounts.py)."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol, TypeVar

from ...apis import definition_pb2 as pb
from ...remoting import RequestCode
from ..access.accounts import Account
from ..refusals import Kind, Refused
from .convert import GRPC_CODES, named

if TYPE_CHECKING:
    import grpc

    from ..broker import Broker


class _Service(Protocol):
    """What `authenticated` needs of the servicer its handlers belong to."""

    broker: Broker


_S = TypeVar("_S", bound=_Service)
_Q = TypeVar("_Q")  # a call's request
_R = TypeVar("_R")  # its response
Unary = Callable[[_S, _Q, "grpc.aio.ServicerContext"], Awaitable[_R]]  # a unary handler


def client_peer(broker: Broker, context: grpc.aio.ServicerContext) -> str:
    """The calling client's address as grpcio writes peers ("ipv4:127.0.0.1:5000")."""
    peer = context.peer() or ""
    return broker.grpc.client_of(peer) if broker.grpc is not None else peer


def peer_ip(broker: Broker, context: grpc.aio.ServicerContext) -> str:
    """ "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000" -> the address."""
    peer = client_peer(broker, context)
    addr = peer.split(":", 1)[1] if ":" in peer else peer
    return addr.rsplit(":", 1)[0].strip("[]")


def caller(broker: Broker, context: grpc.aio.ServicerContext
           ) -> tuple[Account | None, str | None]:
    """(the calling account, None), (None, why it is refused), or (None, None): no ACL."""
    if broker.acl is None:
        return None, None
    meta = dict(context.invocation_metadata() or ())
    account, why = broker.acl.current().authenticate_grpc(
        meta.get("authorization", ""), meta.get("x-mq-date-time", ""), peer_ip(broker, context),
        window_s=broker.config.aclSignatureWindowSeconds)
    if why is not None:
        broker.stats.acl_denied["grpc"] += 1
    return account, why


def refusal(broker: Broker, context: grpc.aio.ServicerContext, code: int | None = None,
            fields: dict[str, str] | None = None) -> str | None:
    """Why this call is refused (authentication, then `code`'s permission on `fields`)."""
    account, why = caller(broker, context)
    if why is None and account is not None and code is not None:
        assert broker.acl is not None  # an account comes only from the ACL
        why = broker.acl.current().permission(account, code, fields or {})
        if why is not None:
            broker.stats.acl_denied["grpc"] += 1
    return why


def consume_refusal(broker: Broker, context: grpc.aio.ServicerContext, group: str,
                    topic: str) -> str | None:
    """Receiving, acking or delaying a group's message: SUB on the topic and the group."""
    return refusal(broker, context, RequestCode.PULL_MESSAGE,
                   {"topic": topic, "consumerGroup": group})


def check_consume(broker: Broker, context: grpc.aio.ServicerContext, group: str,
                  topic: str) -> None:
    """consume_refusal, raised: Refused (UNAUTHORIZED)."""
    why = consume_refusal(broker, context, group, topic)
    if why is not None:
        raise Refused(Kind.UNAUTHORIZED, why)


def answers_refusals(response_cls: Callable[..., _R]
                     ) -> Callable[[Unary[_S, _Q, _R]], Unary[_S, _Q, _R]]:
    """A unary handler whose Refused is answered with its kind's status."""
    def wrap(handler: Unary[_S, _Q, _R]) -> Unary[_S, _Q, _R]:
        @functools.wraps(handler)
        async def answering(self: _S, request: _Q, context: grpc.aio.ServicerContext) -> _R:
            try:
                return await handler(self, request, context)
            except Refused as e:
                code = GRPC_CODES[e.kind]
                return response_cls(status=pb.Status(code=code, message=named(code, str(e))))
        return answering
    return wrap


def authenticated(response_cls: Callable[..., _R]
                  ) -> Callable[[Unary[_S, _Q, _R]], Unary[_S, _Q, _R]]:
    """A unary handler that answers UNAUTHORIZED to a caller the ACL refuses (and its
    Refused with its kind's status)."""
    def wrap(handler: Unary[_S, _Q, _R]) -> Unary[_S, _Q, _R]:
        answering = answers_refusals(response_cls)(handler)

        @functools.wraps(handler)
        async def guarded(self: _S, request: _Q, context: grpc.aio.ServicerContext) -> _R:
            why = refusal(self.broker, context)
            if why is not None:
                return response_cls(status=pb.Status(code=pb.UNAUTHORIZED,
                                                     message=named(pb.UNAUTHORIZED, why)))
            return await answering(self, request, context)
        return guarded
    return wrap
