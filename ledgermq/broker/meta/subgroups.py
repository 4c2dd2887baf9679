"""Subscription group configs (RocketMQ's subscriptionGroup.json): whether a group may
consume, by broadcast too, how often its messages are retried and over how many retry
queues. Made on first use when `autoCreateSubscriptionGroup` allows; followers copy the
master's table (registration.sync_from_master), so a new master has it."""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ...runtime.files import read_json, write_json_atomically
from .creation_limit import CreationLimit


@dataclass
class SubscriptionGroupConfig:
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True
    consumeMessageOrderly: bool = False  # RocketMQ 5: a FIFO group (POP in order)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "SubscriptionGroupConfig":
        """From RocketMQ's JSON (unknown fields ignored); ValueError for a bad value."""
        known = {f.name: f.type for f in fields(cls)}
        out: dict[str, Any] = {}  # bool, int or str, as the field's type says
        for k, v in doc.items():
            if k not in known:
                continue
            if known[k] in ("bool", bool):
                if isinstance(v, str):
                    if v.lower() not in ("true", "false"):
                        raise ValueError(f"{k}={v!r} must be true or false")
                    v = v.lower() == "true"
                out[k] = bool(v)
            elif known[k] in ("int", int):
                out[k] = int(v)
            else:
                out[k] = str(v)
        if not out.get("groupName"):
            raise ValueError("a subscription group needs a groupName")
        if out.get("retryQueueNums", 1) < 1 or out.get("retryMaxTimes", 0) < 0:
            raise ValueError("retryQueueNums must be at least 1 and retryMaxTimes not negative")
        return cls(**out)


class SubscriptionGroups:
    def __init__(self, path: Path, auto_create: bool, default_retry_max: int,
                 limit: CreationLimit | None = None):
        self.limit = limit  # what consumers may create in a minute
        self.path = path
        self.auto_create = auto_create
        self.default_retry_max = default_retry_max
        self.lock = threading.Lock()
        doc = read_json(path, {})
        self.table: dict[str, SubscriptionGroupConfig] = {
            n: SubscriptionGroupConfig.from_json(c)
            for n, c in doc.get("subscriptionGroupTable", {}).items()}

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def for_consumer(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, made on first use when allowed; None: unknown group.
        Refused (TOO_MANY) past the creation limit."""
        cfg = self.table.get(group)
        if cfg is None and self.auto_create:
            if self.limit is not None:
                self.limit.take(group)
            # the defaults, kept in memory (saved with the next change): a read must not
            # need the disk, which may be full
            cfg = self.table[group] = SubscriptionGroupConfig(
                group, retryMaxTimes=self.default_retry_max)
        return cfg

    def put(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        with self.lock:
            self.table[cfg.groupName] = cfg
            self.save()
        return cfg

    def delete(self, group: str) -> bool:
        with self.lock:
            found = self.table.pop(group, None) is not None
            self.save()
        return found

    def replace_all(self, configs: dict[str, SubscriptionGroupConfig]) -> None:
        """A follower takes its master's table as it is."""
        with self.lock:
            if configs != self.table:
                self.table = dict(configs)
                self.save()

    def save(self) -> None:
        write_json_atomically(self.path, self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {"subscriptionGroupTable": {n: asdict(c) for n, c in sorted(self.table.items())}}
