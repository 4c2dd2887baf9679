"""Consumer groups as the broker sees them: which clients are online, what they subscribe
to, and which client holds the lock of each queue (orderly consumption)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ...remoting import Connection, RemotingCommand, RemotingError, RequestCode
from ...wire.message import tag_hash

log = logging.getLogger(__name__)

LOCK_EXPIRE_S = 60.0


def parse_subscription(expression: str | None) -> frozenset[int] | None:
    """'*' (or nothing) -> None (everything); 'a || b' -> the tags' hash codes (pieces left
    empty between bars skipped, as RocketMQ's FilterAPI does)."""
    if not expression or expression.strip() in ("*", ""):
        return None
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    if not tags:
        raise ValueError(f"subscription {expression!r} has no tag")
    return frozenset(tag_hash(t) for t in tags)


@dataclass
class ConsumerGroup:
    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)  # topic -> JSON
    clients: dict[Connection, str] = field(default_factory=dict)  # connection -> client id
    last_seen: dict[Connection, float] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted(set(self.clients.values()))


class ConsumerManager:
    def __init__(self, expire_after_s: float = 120.0):
        self.groups: dict[str, ConsumerGroup] = {}
        self.expire_after_s = expire_after_s
        self.locks: dict[tuple[str, str, int], tuple[str, float]] = {}

    def register(self, conn: Connection, client_id: str, data: dict[str, Any]) -> bool:
        """A consumer's heartbeat; returns True when the group's membership changed."""
        name = data["groupName"]
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = ConsumerGroup(name)
        group.consume_type = data.get("consumeType", group.consume_type)
        group.message_model = data.get("messageModel", group.message_model)
        group.consume_from_where = data.get("consumeFromWhere", group.consume_from_where)
        for sub in data.get("subscriptionDataSet", []):
            group.subscriptions[sub["topic"]] = sub
        changed = group.clients.get(conn) != client_id
        group.clients[conn] = client_id
        group.last_seen[conn] = time.monotonic()
        conn.attrs.setdefault("consumer_groups", set()).add(name)
        if changed:
            self._notify(group, exclude=conn)
        return changed

    def subscribes(self, group_name: str, topic: str) -> bool:
        """Whether a consumer of the group online here subscribes `topic`."""
        group = self.groups.get(group_name)
        return group is not None and topic in group.subscriptions

    def unregister(self, conn: Connection, group_name: str) -> None:
        group = self.groups.get(group_name)
        if group is not None and group.clients.pop(conn, None) is not None:
            group.last_seen.pop(conn, None)
            self._notify(group)
            if not group.clients:
                del self.groups[group_name]

    def connection_closed(self, conn: Connection) -> None:
        for name in list(conn.attrs.get("consumer_groups", ())):
            self.unregister(conn, name)

    def expire(self) -> None:
        horizon = time.monotonic() - self.expire_after_s
        for group in list(self.groups.values()):
            for conn, seen in list(group.last_seen.items()):
                if seen < horizon:
                    log.warning("consumer %s of %s expired", group.clients.get(conn), group.name)
                    self.unregister(conn, group.name)

    def announce_master(self, broker_name: str, addr: str) -> None:
        """This broker became `broker_name`'s master: every consumer connected here (they
        heartbeat to a group's every broker) hears it now, with the group's name, rather
        than at a long poll's timeout on the old master or its next route refresh.
        RocketMQ's clients read it as the usual rebalance nudge and ignore the extra
        fields; ledgermq's fetch the route again (client/push.py)."""
        for group in list(self.groups.values()):
            self._notify(group, brokerName=broker_name, masterAddr=addr)

    def _notify(self, group: ConsumerGroup, exclude: Connection | None = None,
                **extra: str) -> None:
        """Tell the group's clients to rebalance (NOTIFY_CONSUMER_IDS_CHANGED, one-way)."""
        for conn in list(group.clients):
            if conn is exclude or not conn.is_open:
                continue
            try:
                conn.oneway(RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                            ext={"consumerGroup": group.name, **extra}))
            except RemotingError:
                pass

    # ---- queue locks (orderly consumers) -------------------------------------------
    def lock(self, group: str, client_id: str,
             queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
        now = time.monotonic()
        granted = []
        for mq in queues:
            key = (group, mq["topic"], int(mq["queueId"]))
            holder = self.locks.get(key)
            if holder is None or holder[0] == client_id or now - holder[1] > LOCK_EXPIRE_S:
                self.locks[key] = (client_id, now)
                granted.append(mq)
        return granted

    def unlock(self, group: str, client_id: str, queues: list[dict[str, Any]]) -> None:
        for mq in queues:
            key = (group, mq["topic"], int(mq["queueId"]))
            if self.locks.get(key, ("",))[0] == client_id:
                del self.locks[key]
