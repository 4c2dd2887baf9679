"""Which permission each request needs: the one table of the broker's ACL (RocketMQ's
plain ACL rules, made an allow-list). A request code without an entry is refused when
ACL is on; README's ACL table is generated from this one (`markdown_table`).

A rule names the resources a request touches, from its header fields, its body, or the
stored message it names (a message id, a send-back's or a transaction's offset): what
a client says about a message is not trusted, the message is looked up.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...remoting.codes import RETRY_PREFIX, RequestCode
from ...wire.message import PROPERTY_REAL_TOPIC, PROPERTY_RETRY_TOPIC, StoredMessage

if TYPE_CHECKING:
    from .accounts import Account

PUB, SUB = 1, 2  # (acl.py's permission bits)
DLQ_PREFIX = "%DLQ%"


@dataclass(frozen=True)
class Need:
    kind: str  # "topic" or "group"
    name: str
    perm: int


@dataclass(frozen=True)
class Ask:
    """A request as the rules read it. `message(offset)`: the stored message at a
    commit-log offset, or None when there is none (the handler then refuses the request)."""
    fields: dict[str, str]
    body: bytes | None = None
    message: Callable[[int], StoredMessage | None] = lambda offset: None


@dataclass(frozen=True)
class Rule:
    says: str  # what it needs, for the README
    needs: Callable[[Ask], list[Need]] = lambda ask: []
    admin: bool = False  # an admin account only
    peer: bool = False  # a server of the cluster asks (the cluster secret, not an account)


def topic(name: str, perm: int) -> Need:
    """A topic's permission; a group's own %RETRY% and %DLQ% topics are the group's (as
    RocketMQ's): SUB on the group."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(prefix):
            return Need("group", name[len(prefix):], SUB)
    return Need("topic", name, perm)


def group(name: str) -> Need:
    return Need("group", name, SUB)


def _field(ask: Ask, *names: str) -> str:
    for n in names:
        if ask.fields.get(n):
            return str(ask.fields[n])
    raise ValueError(f"no {' or '.join(names)} field")


def _json(ask: Ask) -> dict[str, Any]:
    doc = json.loads(ask.body or b"{}")
    if not isinstance(doc, dict):
        raise ValueError("the body is not a JSON object")
    return doc


def _stored(ask: Ask, field: str) -> StoredMessage | None:
    return ask.message(int(_field(ask, field)))


def _send(ask: Ask) -> list[Need]:
    return [topic(_field(ask, "topic", "b"), PUB)]


def _topic_sub(ask: Ask) -> list[Need]:
    return [topic(_field(ask, "topic"), SUB)]


def _topic_and_group(ask: Ask) -> list[Need]:
    return [topic(_field(ask, "topic"), SUB), group(_field(ask, "consumerGroup"))]


def _group_named(ask: Ask) -> list[Need]:
    return [group(_field(ask, "group"))]


def _batch_ack(ask: Ask) -> list[Need]:
    acks = _json(ask).get("acks") or []
    return [n for a in acks for n in (topic(str(a["t"]), SUB), group(str(a["c"])))]


def _group(ask: Ask) -> list[Need]:
    return [group(_field(ask, "consumerGroup"))]


def _unregister(ask: Ask) -> list[Need]:
    return [group(ask.fields["consumerGroup"])] if ask.fields.get("consumerGroup") else []


def _send_back(ask: Ask) -> list[Need]:
    needs = [group(_field(ask, "group"))]
    msg = _stored(ask, "offset")
    if msg is not None:  # the topic the consumer read it from, not the one it names
        needs.append(topic(msg.properties.get(PROPERTY_RETRY_TOPIC) or msg.topic, SUB))
    return needs


def _view(ask: Ask) -> list[Need]:
    msg = _stored(ask, "offset")
    return [] if msg is None else [topic(msg.topic, SUB)]


def _end_transaction(ask: Ask) -> list[Need]:
    msg = _stored(ask, "commitLogOffset")
    if msg is None:
        return []
    return [topic(msg.properties.get(PROPERTY_REAL_TOPIC) or msg.topic, PUB)]


def _heartbeat(ask: Ask) -> list[Need]:
    needs = []
    for consumer in _json(ask).get("consumerDataSet") or ():
        needs.append(group(str(consumer.get("groupName"))))
        needs += [topic(str(s.get("topic")), SUB)
                  for s in consumer.get("subscriptionDataSet") or ()]
    return needs


def _client_config(ask: Ask) -> list[Need]:
    doc = _json(ask)
    sub = doc.get("subscriptionData") or {}
    return [group(str(doc.get("group")))] + \
        ([topic(str(sub["topic"]), SUB)] if sub.get("topic") else [])


def _locks(ask: Ask) -> list[Need]:
    doc = _json(ask)
    return [group(str(doc.get("consumerGroup")))] + \
        [topic(str(mq.get("topic")), SUB) for mq in doc.get("mqSet") or ()]


ANYONE = Rule("any account")
ADMIN = Rule("an admin account", admin=True)
MASTER_SYNC = Rule("an admin account (a slave syncing from its master signs with one)",
                   admin=True)
PEER = Rule("a server of the cluster (the cluster secret; refused without one when ACL is "
            "on)", peer=True)
C = RequestCode
RULES: dict[int, Rule] = {
    # producing
    C.SEND_MESSAGE: Rule("PUB on the topic", _send),
    C.SEND_MESSAGE_V2: Rule("PUB on the topic", _send),
    C.SEND_BATCH_MESSAGE: Rule("PUB on the topic", _send),
    C.END_TRANSACTION: Rule("PUB on the half message's topic (the message at "
                            "commitLogOffset)", _end_transaction),
    C.CHECK_TRANSACTION_STATE: Rule("PUB on the topic (gRPC check-backs)", _send),
    # consuming
    C.PULL_MESSAGE: Rule("SUB on the topic and the group", _topic_and_group),
    C.LITE_PULL_MESSAGE: Rule("SUB on the topic and the group", _topic_and_group),
    C.POP_MESSAGE: Rule("SUB on the topic and the group", _topic_and_group),
    C.ACK_MESSAGE: Rule("SUB on the topic and the group", _topic_and_group),
    C.CHANGE_MESSAGE_INVISIBLETIME: Rule("SUB on the topic and the group", _topic_and_group),
    C.BATCH_ACK_MESSAGE: Rule("SUB on each ack's topic and group", _batch_ack),
    C.CONSUMER_SEND_MSG_BACK: Rule("SUB on the group and on the topic of the message at "
                                   "the offset", _send_back),
    C.QUERY_CONSUMER_OFFSET: Rule("SUB on the topic and the group", _topic_and_group),
    C.UPDATE_CONSUMER_OFFSET: Rule("SUB on the topic and the group", _topic_and_group),
    C.HEART_BEAT: Rule("SUB on each consumer group and each topic it subscribes",
                       _heartbeat),
    C.CHECK_CLIENT_CONFIG: Rule("SUB on the group and the topic", _client_config),
    C.UNREGISTER_CLIENT: Rule("SUB on the consumer group, if any", _unregister),
    C.LOCK_BATCH_MQ: Rule("SUB on the group and each queue's topic", _locks),
    C.UNLOCK_BATCH_MQ: Rule("SUB on the group and each queue's topic", _locks),
    C.GET_CONSUMER_LIST_BY_GROUP: Rule("SUB on the group", _group),
    C.GET_CONSUMER_CONNECTION_LIST: Rule("SUB on the group", _group),
    C.GET_CONSUME_STATS: Rule("SUB on the group", _group),
    C.GET_SUBSCRIPTIONGROUP_CONFIG: Rule("SUB on the group", _group_named),
    # reading a topic's messages and offsets
    C.QUERY_MESSAGE: Rule("SUB on the topic", _topic_sub),
    C.VIEW_MESSAGE_BY_ID: Rule("SUB on the topic of the message at the offset", _view),
    C.GET_MAX_OFFSET: Rule("SUB on the topic", _topic_sub),
    C.GET_MIN_OFFSET: Rule("SUB on the topic", _topic_sub),
    C.SEARCH_OFFSET_BY_TIMESTAMP: Rule("SUB on the topic", _topic_sub),
    C.GET_EARLIEST_MSG_STORETIME: Rule("SUB on the topic", _topic_sub),
    C.GET_TOPIC_STATS_INFO: Rule("SUB on the topic", _topic_sub),
    C.GET_TOPIC_CONFIG: Rule("SUB on the topic", _topic_sub),
    C.QUERY_TOPIC_CONSUME_BY_WHO: Rule("SUB on the topic", _topic_sub),
    C.REPORT_MASTER_UNREACHABLE: ANYONE,  # (a hint: the leader decides on its own state)
    C.GET_ROUTEINFO_BY_TOPIC: ANYONE,  # (gRPC QueryRoute: routes are the name server's)
    # the broker's configuration and every group's state
    C.UPDATE_AND_CREATE_TOPIC: ADMIN,
    C.DELETE_TOPIC_IN_BROKER: ADMIN,
    C.GET_ALL_TOPIC_CONFIG: MASTER_SYNC,
    C.GET_BROKER_RUNTIME_INFO: ADMIN,
    C.GET_BROKER_CONFIG: ADMIN,
    C.GET_PRODUCER_CONNECTION_LIST: ADMIN,
    C.UPDATE_BROKER_CONFIG: ADMIN,
    C.GET_ALL_CONSUMER_OFFSET: MASTER_SYNC,
    C.GET_ALL_DELAY_OFFSET: MASTER_SYNC,
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ADMIN,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: MASTER_SYNC,
    C.DELETE_SUBSCRIPTIONGROUP: ADMIN,
    C.INVOKE_BROKER_TO_RESET_OFFSET: ADMIN,
    C.END_HA_RECOVERY: Rule("an admin account and the cluster secret", admin=True),
    # the cluster's own protocols
    C.CONTROL_PROMOTE: PEER,
    C.CLIENTS_CANNOT_REACH_LEADER: PEER,
    C.GET_BROKER_EPOCH_CACHE: PEER,
    C.PEER_AUTH: Rule("anyone: the cluster-secret handshake itself", peer=True),
}


def refusal(account: Account, code: int, ask: Ask) -> str | None:
    """Why `account` (acl.Account) may not make this request, or None."""
    rule = RULES.get(code)
    if rule is None:
        return (f"request code {code} has no ACL rule on this broker: refused (a request "
                "it does not know the permission of is never served with ACL on)")
    if account.admin:
        return None
    if rule.admin:
        return f"account {account.access_key} is not an admin (request code {code})"
    try:
        needs = rule.needs(ask)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        return f"request code {code}: cannot tell which permission it needs: {e}"
    for need in needs:
        ok = account.topic_allows(need.name, need.perm) if need.kind == "topic" else \
            account.group_allows(need.name, need.perm)
        if not ok:
            verb = "publish to" if need.perm == PUB else "subscribe"
            return f"account {account.access_key} may not {verb} {need.kind} {need.name}"
    return None


def markdown_table() -> str:
    """README's ACL table: every request code and what it needs."""
    rows = ["| Request code | Needs |", "|---|---|"]
    for code, rule in sorted(RULES.items(), key=lambda kv: int(kv[0])):
        rows.append(f"| `{RequestCode(code).name}` ({int(code)}) | {rule.says} |")
    return "\n".join(rows)


if __name__ == "__main__":  # the README's table: python -m ledgermq.broker.access.rules
    print(markdown_table())
