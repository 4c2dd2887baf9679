"""The broker's topics as senders, consumers and replicas meet them: created on demand
(auto-creation from the TBW102 template, retry and dead-letter topics), and adopted from
the log by a broker that holds messages of topics it has no config for."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, cast

from ...remoting.codes import DLQ_PREFIX, PERM_READ, PERM_WRITE, RETRY_PREFIX
from ...store import MessageStore
from ..access.system_topics import AUTO_CREATE_TOPIC
from .creation_limit import CreationLimit
from .topic_table import TopicConfig, TopicTable

log = logging.getLogger(__name__)


class Topics:
    def __init__(self, table: TopicTable, store: MessageStore, auto_create: bool,
                 is_slave: Callable[[], bool], announce: Callable[[], None],
                 limit: CreationLimit | None = None):
        self.table = table
        self.limit = limit  # what clients' sends and consumers may create in a minute
        self.store = store
        self.auto_create = auto_create
        self.is_slave = is_slave  # a slave's queues may come before the topic's config
        self.announce = announce  # tell the name server about the change

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def create(self, tc: TopicConfig) -> TopicConfig:
        self.table.put(tc)
        return self._created(tc)

    def _created(self, tc: TopicConfig) -> TopicConfig:
        self.announce()
        log.info("topic %s created: %d write / %d read queues", tc.topicName,
                 tc.writeQueueNums, tc.readQueueNums)
        return tc

    def delete(self, topic: str) -> None:
        self.table.delete(topic)
        self.announce()

    def new_for_send(self, topic: str, default_topic: str,
                     queue_nums: int) -> TopicConfig | None:
        """The config a send to a topic not in the table creates (create_off_loop), when
        the template allows; None: refuse. Refused (TOO_MANY) past the creation limit."""
        if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
            return self._counted(TopicConfig(topic, 1, 1))
        template = self.table.get(default_topic or AUTO_CREATE_TOPIC)
        if not self.auto_create or template is None:
            return None
        n = max(1, min(queue_nums or template.writeQueueNums, template.writeQueueNums))
        return self._counted(TopicConfig(topic, n, n))

    async def create_off_loop(self, tc: TopicConfig) -> TopicConfig:
        """create(), the table's fsync on a worker thread: the event loop serves the other
        requests meanwhile. OSError (and the table unchanged) when it cannot be saved."""
        await asyncio.get_running_loop().run_in_executor(None, self.table.put, tc)
        return self._created(tc)

    def _counted(self, tc: TopicConfig) -> TopicConfig:
        if self.limit is not None:
            self.limit.take(tc.topicName)
        return tc

    def for_delivery(self, topic: str, queue_id: int) -> TopicConfig:
        """The topic a broker's own delivery writes to (a due timer or delayed message, a
        committed transaction). Its config may exist only on a master that died after the
        message was parked (a new master knows topics only from its log): made here, and
        grown, so that every queue the log or this delivery uses is served."""
        tc = self.table.get(topic)
        if tc is not None and queue_id < min(tc.writeQueueNums, tc.readQueueNums):
            return tc
        n = max([queue_id] + self.store.queue_ids(topic)) + 1
        if tc is not None:
            n = max(n, tc.writeQueueNums, tc.readQueueNums)
            return self.create(TopicConfig(topic, n, n, tc.perm, tc.topicFilterType,
                                           tc.topicSysFlag, tc.order))
        return self.create(TopicConfig(topic, n, n))

    def for_pull(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic) or self.replicated(topic)

    def adopt_stored(self) -> None:
        """A slave that becomes master serves every topic its log holds, config or not."""
        for topic in self.store.topics():
            if self.table.get(topic) is None:
                self.replicated(topic, True)

    def replicated(self, topic: str, force: bool = False) -> TopicConfig | None:
        """A slave may hold a topic's messages before it has copied the topic's config
        from the master: its queues are proof enough to serve reads."""
        qids = self.store.queue_ids(topic) if force or self.is_slave() else []
        if not qids:
            return None
        n = max(qids) + 1
        tc = TopicConfig(topic, n, n)
        self.table.put(tc)
        return tc

    def retry(self, group: str, queues: int = 1) -> TopicConfig:
        """The group's retry topic, with `queues` queues (its retryQueueNums) when new."""
        tc = self.new_retry(group, queues)
        if tc is None:  # new_retry found it
            return cast(TopicConfig, self.table.get(RETRY_PREFIX + group))
        return self.create(tc)

    def new_retry(self, group: str, queues: int = 1) -> TopicConfig | None:
        """The retry topic `group` lacks, counted against the creation limit (to create,
        e.g. with create_off_loop); None when it has one."""
        name = RETRY_PREFIX + group
        return None if self.table.get(name) else self._counted(TopicConfig(name, queues,
                                                                           queues))

    def dlq(self, group: str) -> tuple[str, int]:
        """The group's dead-letter topic and its one queue."""
        name = DLQ_PREFIX + group
        if self.table.get(name) is None:
            self.create(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
        return name, 0
