"""The broker's topic table: each topic's queues and permissions, kept as a small JSON
document under <storePathRootDir>/config, replaced atomically."""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...remoting.codes import PERM_INHERIT, PERM_READ, PERM_WRITE
from ...runtime.clock import wall_ms
from ...runtime.files import read_json, write_json_atomically
from ..access.system_topics import (
    AUTO_CREATE_TOPIC, POP_ACK_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_CHECK_MAX_TOPIC,
    TRANS_HALF_TOPIC, TRANS_OP_TOPIC,
)

MAX_QUEUE_NUMS = 1024  # the most queues a topic gets, from any path


@dataclass
class TopicConfig:
    topicName: str
    readQueueNums: int = 8
    writeQueueNums: int = 8
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False
    # RocketMQ 5's topic attributes; the one it knows is message.type (what a topic takes:
    # NORMAL, FIFO, DELAY, TRANSACTION or MIXED), which RocketMQ's proxy checks sends by
    attributes: dict[str, str] = field(default_factory=dict)


MESSAGE_TYPE = "message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


def with_attributes(current: dict[str, str], change: str) -> dict[str, str]:
    """`current` changed as RocketMQ's `updateTopic -a` writes it: "+key=value" sets,
    "-key" removes, comma separated. ValueError for anything else, or an attribute or a
    message type RocketMQ does not know."""
    out = dict(current)
    for item in filter(None, (x.strip() for x in change.split(","))):
        key, _, value = item[1:].partition("=")
        if item[0] not in "+-" or key != MESSAGE_TYPE:
            raise ValueError(f"attribute {item[:64]!r}: the only one is +{MESSAGE_TYPE}=TYPE "
                             f"(or -{MESSAGE_TYPE})")
        if item[0] == "-":
            out.pop(key, None)
        elif value not in MESSAGE_TYPES:
            raise ValueError(f"{MESSAGE_TYPE}={value[:32]!r} is not one of "
                             f"{', '.join(MESSAGE_TYPES)}")
        else:
            out[key] = value
    return out


class TopicTable:
    def __init__(self, path: Path, default_queue_nums: int, auto_create: bool,
                 named_topics: tuple[tuple[str, int, bool], ...] = ()):
        """`named_topics`: (name, queues, writable) of the topics named after the cluster
        and the broker, which exist whatever the table says (RocketMQ's: readable and
        writable only when enabled)."""
        self.path = path
        self.lock = threading.Lock()
        doc = read_json(path, {})
        self.topics: dict[str, TopicConfig] = {
            name: TopicConfig(**{k: v for k, v in tc.items() if k in TopicConfig.__dataclass_fields__})
            for name, tc in doc.get("topicConfigTable", {}).items()}
        self.version = doc.get("dataVersion", {"timestamp": wall_ms(), "counter": 0})
        if auto_create:
            self.topics.setdefault(AUTO_CREATE_TOPIC, TopicConfig(
                AUTO_CREATE_TOPIC, default_queue_nums, default_queue_nums,
                PERM_READ | PERM_WRITE | 0x1))
        self.topics.setdefault(SCHEDULE_TOPIC, TopicConfig(SCHEDULE_TOPIC, 18, 18))
        for name in (TRANS_HALF_TOPIC, TRANS_OP_TOPIC, TRANS_CHECK_MAX_TOPIC, TIMER_TOPIC,
                     POP_ACK_TOPIC):
            self.topics.setdefault(name, TopicConfig(name, 1, 1))
        for name, queues, enabled in named_topics:
            self.topics[name] = TopicConfig(name, queues, queues, PERM_INHERIT | (
                PERM_READ | PERM_WRITE if enabled else 0))

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, tc: TopicConfig) -> None:
        """Add or replace a topic; when its file cannot be written (OSError, e.g. a full
        disk) the table stays as it was and the error goes to the caller."""
        with self.lock:
            before, version = self.topics.get(tc.topicName), self.version
            self.topics[tc.topicName] = tc
            self.version = {"timestamp": wall_ms(),
                            "counter": self.version.get("counter", 0) + 1}
            try:
                self.save()
            except OSError:
                if before is None:
                    del self.topics[tc.topicName]
                else:
                    self.topics[tc.topicName] = before
                self.version = version
                raise

    def delete(self, topic: str) -> bool:
        with self.lock:
            found = self.topics.pop(topic, None) is not None
            if found:
                self.version["counter"] = self.version.get("counter", 0) + 1
                self.save()
            return found

    def save(self) -> None:
        write_json_atomically(self.path, self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {"topicConfigTable": {n: asdict(tc) for n, tc in sorted(self.topics.items())},
                "dataVersion": self.version}
