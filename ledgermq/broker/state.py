"""Broker metadata kept beside the store: topic configs and consumer offsets.

Both are small JSON documents under <storePathRootDir>/config, replaced atomically.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..remoting.codes import PERM_READ, PERM_WRITE
from ..store.store import check_topic
from ..wire.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, MessageFormatError
from ..runtime.files import replace_file

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC = "TBW102"  # the template topic of auto-creation
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# transactions: half messages, the decisions on them, and those never decided
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # timer messages until due (RocketMQ 5's name)
POP_ACK_TOPIC = "rmq_sys_POP_ACK"  # POP acks, so that a new master knows them
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# the topics only the broker writes (RocketMQ's TopicValidator not-allowed-send set, ours)
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC, TRANS_CHECK_MAX_TOPIC, TIMER_TOPIC,
    POP_ACK_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})


MAX_QUEUE_NUMS = 1024  # the most queues a topic gets, from any path


class BadParked(ValueError):
    """A parked message's destination the broker cannot trust (see parked_destination)."""


def parked_destination(props: dict[str, str]) -> tuple[str, int]:
    """Where a message the broker parked (delayed, timer, half) really goes, read back
    from its own system topic and checked before use: a bad value (written before clients
    were kept out of these topics, or damaged) must be logged and skipped, never make a
    topic of a million queues nor stop the service that reads it. BadParked says why."""
    topic = props.get(PROPERTY_REAL_TOPIC)
    if not topic:
        raise BadParked("it has no REAL_TOPIC")
    try:
        check_topic(topic)
    except MessageFormatError as e:
        raise BadParked(f"its REAL_TOPIC is not a topic: {e}") from None
    raw = props.get(PROPERTY_REAL_QUEUE_ID, "0")
    try:
        qid = int(raw)
    except ValueError:
        qid = -1
    if not 0 <= qid < MAX_QUEUE_NUMS:
        raise BadParked(f"its REAL_QID {raw[:20]!r} is not a queue id (0..{MAX_QUEUE_NUMS - 1})")
    return topic, qid


def client_may_send(topic: str) -> bool:
    """Whether a client's send may write into `topic` (no system topic)."""
    return topic not in NOT_ALLOWED_SEND_TOPICS and not topic.startswith(SYSTEM_TOPIC_PREFIX)


def write_json_atomically(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(doc, indent=1, sort_keys=True).encode())


def read_json(path: Path, default):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except ValueError:
        bak = path.with_name(path.name + ".corrupt")
        os.replace(path, bak)
        log.error("%s is not valid JSON; moved it to %s and started empty", path, bak)
        return default


@dataclass
class TopicConfig:
    topicName: str
    readQueueNums: int = 8
    writeQueueNums: int = 8
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False


class TopicTable:
    def __init__(self, path: Path, default_queue_nums: int, auto_create: bool):
        self.path = path
        self.lock = threading.Lock()
        doc = read_json(path, {})
        self.topics: dict[str, TopicConfig] = {
            name: TopicConfig(**{k: v for k, v in tc.items() if k in TopicConfig.__dataclass_fields__})
            for name, tc in doc.get("topicConfigTable", {}).items()}
        self.version = doc.get("dataVersion", {"timestamp": int(time.time() * 1000), "counter": 0})
        if auto_create:
            self.topics.setdefault(AUTO_CREATE_TOPIC, TopicConfig(
                AUTO_CREATE_TOPIC, default_queue_nums, default_queue_nums,
                PERM_READ | PERM_WRITE | 0x1))
        self.topics.setdefault(SCHEDULE_TOPIC, TopicConfig(SCHEDULE_TOPIC, 18, 18))
        for name in (TRANS_HALF_TOPIC, TRANS_OP_TOPIC, TRANS_CHECK_MAX_TOPIC, TIMER_TOPIC,
                     POP_ACK_TOPIC):
            self.topics.setdefault(name, TopicConfig(name, 1, 1))

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, tc: TopicConfig) -> None:
        """Add or replace a topic; when its file cannot be written (OSError, e.g. a full
        disk) the table stays as it was and the error goes to the caller."""
        with self.lock:
            before, version = self.topics.get(tc.topicName), self.version
            self.topics[tc.topicName] = tc
            self.version = {"timestamp": int(time.time() * 1000),
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

    def to_json(self) -> dict:
        return {"topicConfigTable": {n: asdict(tc) for n, tc in sorted(self.topics.items())},
                "dataVersion": self.version}


class ConsumerOffsets:
    """Committed offsets per (topic, group, queue); saved periodically and on stop."""

    def __init__(self, path: Path):
        self.path = path
        doc = read_json(path, {})
        self.table: dict[str, dict[int, int]] = {
            key: {int(q): int(o) for q, o in qs.items()}
            for key, qs in doc.get("offsetTable", {}).items()}
        self.dirty = False

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self.dirty = True

    def query(self, topic: str, group: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def topics_of(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.table if k.split("@", 1)[1] == group)

    def save(self) -> None:
        if self.dirty:
            self.dirty = False
            write_json_atomically(self.path, self._doc())

    async def save_off_loop(self) -> None:
        """save(), its fsync on a worker thread: the event loop serves requests meanwhile
        (the table is copied here, on the loop, which alone changes it)."""
        if self.dirty:
            self.dirty = False
            doc = self._doc()
            await asyncio.get_running_loop().run_in_executor(
                None, write_json_atomically, self.path, doc)

    def _doc(self) -> dict:
        return {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())}
                                for k, v in self.table.items()}}
