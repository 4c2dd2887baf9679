"""ACL for RocketMQ 5 clients: each call's `authorization` metadata (HMAC-SHA1 of its
x-mq-date-time keyed by the account's secret) names an account of plain_acl.yml; what it
may do is decided by the same rules as for remoting clients (broker/access/accounts.py)."""
from __future__ import annotations

import functools
import weakref
from typing import (
    TYPE_CHECKING, Any, AsyncGenerator, Awaitable, Callable, Protocol, TypeVar, cast,
)

from ...remoting import RequestCode
from ..access.accounts import Account
from ..refusals import Kind, Refused
from .convert import refused_status

if TYPE_CHECKING:
    from ...grpcserver import Context
    from ..broker import Broker


class _Service(Protocol):
    """What `authenticated` needs of the servicer its handlers belong to."""

    broker: Broker


_S = TypeVar("_S", bound=_Service)
_Q = TypeVar("_Q")  # a call's request
_R = TypeVar("_R")  # its response
Unary = Callable[[_S, _Q, "Context"], Awaitable[_R]]  # a unary handler
# a server-streaming handler (for Telemetry, _Q is the stream of requests)
Streaming = Callable[[_S, _Q, "Context"], AsyncGenerator[_R, None]]


def peer_ip(context: Context) -> str:
    """The calling client's address: "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000" -> the
    address."""
    peer = context.peer()
    addr = peer.split(":", 1)[1] if ":" in peer else peer
    return addr.rsplit(":", 1)[0].strip("[]")


# the account each open call proved: its wrapper and its handler both ask (one signature
# check a call, not two); an entry goes with its call
_proven: weakref.WeakKeyDictionary[Context, Account] = weakref.WeakKeyDictionary()


def caller(broker: Broker, context: Context) -> Account | None:
    """The calling account (None: the broker has no ACL); Refused (UNAUTHORIZED) for a
    caller the ACL refuses."""
    if broker.acl is None:
        return None
    account = _proven.get(context)
    if account is not None:
        return account
    meta = context.metadata
    try:
        account = broker.acl.current().authenticate_grpc(
            meta.get("authorization", ""), meta.get("x-mq-date-time", ""),
            peer_ip(context), window_s=broker.config.aclSignatureWindowSeconds)
    except Refused:
        broker.stats.acl_denied["grpc"] += 1
        raise
    _proven[context] = account
    return account


def authorize(broker: Broker, context: Context, code: int | None = None,
              fields: dict[str, str] | None = None) -> None:
    """The caller is authenticated and, with `code`, may do it on `fields`; Refused
    (UNAUTHORIZED) saying why not."""
    account = caller(broker, context)
    if account is not None and code is not None:
        assert broker.acl is not None  # an account comes only from the ACL
        why = broker.acl.current().permission(account, code, fields or {})
        if why is not None:
            broker.stats.acl_denied["grpc"] += 1
            raise Refused(Kind.UNAUTHORIZED, why)


def authorize_consume(broker: Broker, context: Context, group: str,
                      topic: str) -> None:
    """Receiving, acking or delaying a group's message: SUB on the topic and the group."""
    authorize(broker, context, RequestCode.PULL_MESSAGE, {"topic": topic, "consumerGroup": group})


def permits(broker: Broker, context: Context, code: int,
            fields: dict[str, str]) -> bool:
    """authorize, as a question."""
    try:
        authorize(broker, context, code, fields)
    except Refused:
        return False
    return True


def answers_refusals(response_cls: Callable[..., Any]
                     ) -> Callable[[Unary[_S, _Q, _R]], Unary[_S, _Q, _R]]:
    """A unary handler whose Refused is answered with its kind's status (`response_cls`;
    `_R` is what the handler answers: maybe serialized already)."""
    def wrap(handler: Unary[_S, _Q, _R]) -> Unary[_S, _Q, _R]:
        @functools.wraps(handler)
        async def answering(self: _S, request: _Q, context: Context) -> _R:
            try:
                return await handler(self, request, context)
            except Refused as e:
                return cast(_R, response_cls(status=refused_status(e)))
        return answering
    return wrap


def authenticated(response_cls: Callable[..., Any]
                  ) -> Callable[[Unary[_S, _Q, _R]], Unary[_S, _Q, _R]]:
    """A unary handler that answers UNAUTHORIZED to a caller the ACL refuses (and its
    Refused with its kind's status). (Its answers may be serialized already: `_R` is
    what it returns, `response_cls` what a refusal is.)"""
    def wrap(handler: Unary[_S, _Q, _R]) -> Unary[_S, _Q, _R]:
        @functools.wraps(handler)
        async def guarded(self: _S, request: _Q, context: Context) -> _R:
            # (answers_refusals' work, in this frame: one coroutine less a call)
            try:
                authorize(self.broker, context)
                return await handler(self, request, context)
            except Refused as e:
                return cast(_R, response_cls(status=refused_status(e)))
        return guarded
    return wrap


def streams_refusals(response_cls: Callable[..., _R]
                     ) -> Callable[[Streaming[_S, _Q, _R]], Streaming[_S, _Q, _R]]:
    """A streaming handler whose Refused ends its stream with one response carrying its
    kind's status."""
    def wrap(handler: Streaming[_S, _Q, _R]) -> Streaming[_S, _Q, _R]:
        @functools.wraps(handler)
        async def answering(self: _S, request: _Q, context: Context
                            ) -> AsyncGenerator[_R, None]:
            responses = handler(self, request, context)
            try:
                async for response in responses:
                    yield response
            except Refused as e:
                yield response_cls(status=refused_status(e))
            finally:  # the handler's own clean-up runs now, not when collected
                await responses.aclose()
        return answering
    return wrap
