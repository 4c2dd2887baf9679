"""What operators and mqadmin ask: topics (create, update, delete, list), the broker's
runtime info and statistics, every consumer and delay offset (RocketMQ's
AdminBrokerProcessor)."""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...remoting.transport import Handler
from ...store.store import check_topic
from ...wire.message import MessageFormatError
from ..meta.topic_table import MESSAGE_TYPE, TopicConfig, with_attributes
from ..modes import not_in_mode
from ..name_server_link import HANDED_BY_MASTER, json_body
from ..queue_tables import queue_table

if TYPE_CHECKING:
    from ..broker import Broker

HAND_OVER_MODES = "dledger, controller or checkpoint"  # (modes/client_handover.py)


class AdminProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.offsets = broker.offsets

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.GET_TOPIC_CONFIG: self.topic_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
            # served by the mode that has them (the mode's handlers replace these)
            RequestCode.CONTROL_PROMOTE: not_in_mode("checkpoint"),
            RequestCode.GET_BROKER_EPOCH_CACHE: not_in_mode("controller"),
            RequestCode.END_HA_RECOVERY: not_in_mode("classic-ha"),
            RequestCode.REPORT_MASTER_UNREACHABLE: not_in_mode(HAND_OVER_MODES),
            RequestCode.CLIENTS_CANNOT_REACH_LEADER: not_in_mode(HAND_OVER_MODES),
        }

    async def update_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        topic = ext["topic"]
        try:
            check_topic(topic)
        except MessageFormatError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        read, write = int(ext.get("readQueueNums", 8)), int(ext.get("writeQueueNums", 8))
        if not (0 < read <= 1024 and 0 < write <= 1024):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"queue numbers must be in 1..1024 (read {read}, write {write})")
        before = self.topics.get(topic)
        try:
            attributes = with_attributes(before.attributes if before else {},
                                         ext.get("attributes") or "")
        except ValueError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"topic {topic}: {e}")
        tc = TopicConfig(
            topic, read, write, int(ext.get("perm", 6)), ext.get("topicFilterType", "SINGLE_TAG"),
            int(ext.get("topicSysFlag", 0)), str(ext.get("order", "false")).lower() == "true",
            attributes)
        await self.topics.create_off_loop(tc)
        await self.broker.namesrv.announced()
        await self._hand_to_group(cmd, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            **{k: str(v).lower() if isinstance(v, bool) else str(v)
               for k, v in asdict(tc).items() if k not in ("topicName", "attributes")},
            "topic": topic,  # the whole config as made here, not the change asked for
            "attributes": ",".join([f"+{k}={v}" for k, v in attributes.items()]
                                   or [f"-{MESSAGE_TYPE}"])})
        return cmd.response(ResponseCode.SUCCESS)

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = cmd.ext["topic"]
        self.topics.delete(topic)
        await self.broker.namesrv.announced()
        await self._hand_to_group(cmd, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        return cmd.response(ResponseCode.SUCCESS)

    async def _hand_to_group(self, cmd: RemotingCommand, code: int, ext: dict[str, str]) -> None:
        """A topic change made on the master reaches the group's other brokers before it
        is answered, unless it is itself one handed over."""
        if HANDED_BY_MASTER not in cmd.ext and self.broker.mode.is_writable:
            await self.broker.namesrv.hand_to_group(code, ext)

    def all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json_body(self.topics.table.to_json()))

    def topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """One topic's config (RocketMQ 5's TopicConfigAndQueueMapping, no static-topic
        mapping here)."""
        topic = cmd.ext["topic"]
        tc = self.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. "
                                f"topic: {topic}")
        # a topic whose type nobody declared takes every kind of message here (as on
        # RocketMQ 4): MIXED, so RocketMQ's proxy lets FIFO, delayed and transactional
        # messages through to it (it would hold an untyped topic to NORMAL)
        attributes = {MESSAGE_TYPE: "MIXED", **tc.attributes}
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(
            {**asdict(tc), "attributes": attributes, "mappingDetail": None}))

    def runtime_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json_body({"table": self.broker.runtime_info()}))

    def consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = cmd.ext["consumerGroup"]
        topic = cmd.ext.get("topic")
        topics = [topic] if topic else self.offsets.topics_of(group)
        rows = []
        for t in topics:
            tc = self.topics.get(t)
            for qid in range(tc.writeQueueNums if tc else 0):
                committed = self.offsets.query(t, group, qid)
                consumed = -1 if committed is None else committed
                rows.append({"topic": t, "brokerName": self.broker.config.brokerName,
                             "queueId": qid, "brokerOffset": self.store.max_offset_in_queue(t, qid),
                             # (pulls are not tracked apart: none counted in flight)
                             "consumerOffset": consumed, "pullOffset": consumed,
                             "lastTimestamp": 0})
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            queue_table(rows, cmd.language, {"consumeTps": 0}))

    def topic_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = cmd.ext["topic"]
        tc = self.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        rows = [{"topic": topic, "brokerName": self.broker.config.brokerName, "queueId": q,
                 "minOffset": self.store.min_offset_in_queue(topic, q),
                 "maxOffset": self.store.max_offset_in_queue(topic, q),
                 "lastUpdateTimestamp": 0}
                for q in range(tc.writeQueueNums)]
        return cmd.response(ResponseCode.SUCCESS, None, None, queue_table(rows, cmd.language))

    def consumed_by(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The groups with offsets in the topic here or a consumer online subscribing it."""
        topic = cmd.ext["topic"]
        online = {g.name for g in self.broker.consumers.groups.values()
                  if g.clients and topic in g.subscriptions}
        groups = sorted(online | set(self.offsets.groups_of(topic)))
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"groupList": groups}))

    def all_consumer_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"offsetTable": {
            k: {str(q): o for q, o in v.items()} for k, v in self.offsets.table.items()}}))

    def all_delay_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(
            {"offsetTable": {str(k): v for k, v in self.broker.schedule.offsets.items()}}))
