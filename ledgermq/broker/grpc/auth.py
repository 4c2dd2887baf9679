"""ACL for RocketMQ 5 clients: each call's `authorization` metadata (HMAC-SHA1 of its
x-mq-date-time keyed by the account's secret) names an account of plain_acl.yml; what it
may do is decided by the same rules as for remoting clients (broker/access/accounts.py)."""
from __future__ import annotations

import functools

from ...apis import definition_pb2 as pb
from ...remoting import RequestCode
from ..access.accounts import Account


def peer_ip(context) -> str:
    """ "ipv4:127.0.0.1:5000" / "ipv6:[::1]:5000" -> the address."""
    peer = context.peer() or ""
    addr = peer.split(":", 1)[1] if ":" in peer else peer
    return addr.rsplit(":", 1)[0].strip("[]")


def caller(broker, context) -> tuple[Account | None, str | None]:
    """(the calling account, None), (None, why it is refused), or (None, None): no ACL."""
    if broker.acl is None:
        return None, None
    meta = dict(context.invocation_metadata() or ())
    account, why = broker.acl.current().authenticate_grpc(
        meta.get("authorization", ""), meta.get("x-mq-date-time", ""), peer_ip(context),
        window_s=broker.config.aclSignatureWindowSeconds)
    if why is not None:
        broker.stats.acl_denied["grpc"] += 1
    return account, why


def refusal(broker, context, code: int | None = None, fields: dict | None = None):
    """Why this call is refused (authentication, then `code`'s permission on `fields`)."""
    account, why = caller(broker, context)
    if why is None and account is not None and code is not None:
        why = broker.acl.current().permission(account, code, fields or {})
        if why is not None:
            broker.stats.acl_denied["grpc"] += 1
    return why


def consume_refusal(broker, context, group: str, topic: str) -> str | None:
    """Receiving, acking or delaying a group's message: SUB on the topic and the group."""
    return refusal(broker, context, RequestCode.PULL_MESSAGE,
                   {"topic": topic, "consumerGroup": group})


def authenticated(response_cls):
    """A unary handler that answers UNAUTHORIZED to a caller the ACL refuses."""
    def wrap(handler):
        @functools.wraps(handler)
        async def guarded(self, request, context):
            why = refusal(self.broker, context)
            if why is not None:
                return response_cls(status=pb.Status(code=pb.UNAUTHORIZED, message=why))
            return await handler(self, request, context)
        return guarded
    return wrap
