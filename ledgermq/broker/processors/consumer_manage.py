"""Clients and their groups: heartbeats, unregistration, the group's members and
connections, committed offsets, and the locks of orderly consumers (RocketMQ's
ClientManageProcessor and ConsumerManageProcessor)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, cast

from ...filter.sql92 import SqlError, compile_sql
from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...remoting.codes import RETRY_PREFIX
from ...remoting.transport import Handler
from ...store.store import check_topic
from ...wire.message import MessageFormatError
from ..json_bodies import json_object, objects, queue_id, text
from ..name_server_link import json_body
from ..refusals import Refused
from .refusal_codes import REMOTING_CODES

MAX_PRODUCER_GROUPS_PER_CONNECTION = 64  # what one client's heartbeats may name

if TYPE_CHECKING:
    from ..broker import Broker
    from ..meta.topic_table import TopicConfig


class ConsumerManageProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.consumers = broker.consumers
        self.offsets = broker.offsets
        self.store = broker.store

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
        }

    def _bad_subscription(self, subs: list[dict[str, Any]]) -> str | None:
        """Why one of these subscriptions cannot be served, or None."""
        for sub in subs:
            if (sub.get("expressionType") or "TAG") != "SQL92":
                continue
            if not self.broker.config.enablePropertyFilter:
                return ("The broker does not support consumer to filter message by SQL92: set "
                        "enablePropertyFilter=true in its broker.conf")
            try:
                compile_sql(sub.get("subString") or "")
            except SqlError as e:
                return str(e)
        return None

    def check_client_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = json_object(cast(bytes, cmd.body))  # a received body is bytes
        why = self._bad_subscription(objects([data.get("subscriptionData") or {}],
                                             "subscriptionData"))
        if why:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, why)
        return cmd.response(ResponseCode.SUCCESS)

    def heartbeat(self, cmd: RemotingCommand,
                  conn: Connection) -> RemotingCommand | Awaitable[RemotingCommand]:
        data = json_object(cast(bytes, cmd.body), "the heartbeat")
        consumers = objects(data.get("consumerDataSet"), "consumerDataSet")
        producers = objects(data.get("producerDataSet"), "producerDataSet")
        for consumer in consumers:
            text(consumer, "groupName", "a consumer")
            for sub in objects(consumer.get("subscriptionDataSet"), "subscriptionDataSet"):
                text(sub, "topic", "a subscription")
        client_id = str(data.get("clientID") or conn.peer)
        conn.attrs["client_id"] = client_id
        conn.attrs["language"] = cmd.language  # how it reads what the broker sends it
        conn.attrs["version"] = cmd.version
        for consumer in consumers:
            group = consumer["groupName"]
            try:  # its retry topic is named after it: it must make a topic's name
                check_topic(RETRY_PREFIX + group)
            except MessageFormatError as e:
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    f"consumer group {group[:64]!r} is not a valid group: {e}")
            why = self._bad_subscription(consumer.get("subscriptionDataSet", []))
            if why:
                return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                    f"group {group}: {why}")
        retry_topics: list[TopicConfig] = []
        for consumer in consumers:
            self.consumers.register(conn, client_id, consumer)
            if consumer.get("messageModel", "CLUSTERING") == "CLUSTERING":
                # as RocketMQ's: a group the broker knows (or may make) gets its retry topic
                try:
                    sg = self.broker.subgroups.for_consumer(consumer["groupName"])
                    tc = sg and self.broker.topics.new_retry(consumer["groupName"],
                                                             sg.retryQueueNums)
                except Refused as e:
                    return cmd.response(REMOTING_CODES[e.kind], str(e))
                if tc:
                    retry_topics.append(tc)
        mine = conn.attrs.setdefault("producer_groups", set())
        for producer in producers:
            if len(mine) < MAX_PRODUCER_GROUPS_PER_CONNECTION:  # (a client's, capped)
                mine.add(str(producer.get("groupName")))
        if retry_topics:  # the topic table saved off the event loop, then answered
            return self._create_then_answer(cmd, retry_topics)
        return cmd.response(ResponseCode.SUCCESS)

    async def _create_then_answer(self, cmd: RemotingCommand,
                                  topics: list[TopicConfig]) -> RemotingCommand:
        for tc in topics:
            try:
                await self.broker.topics.create_off_loop(tc)
            except OSError as e:
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    f"retry topic {tc.topicName} not created: {e}")
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = cmd.ext.get("consumerGroup")
        if group:
            self.consumers.unregister(conn, group)
        return cmd.response(ResponseCode.SUCCESS)

    def consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = self.consumers.groups.get(cmd.ext["consumerGroup"])
        if group is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"no consumer for this group, {cmd.ext['consumerGroup']}")
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json_body({"consumerIdList": group.client_ids()}))

    def consumer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = self.consumers.groups.get(cmd.ext["consumerGroup"])
        if group is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"the consumer group[{cmd.ext['consumerGroup']}] not online")
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({
            "connectionSet": [{"clientId": cid, "clientAddr": c.peer} for c, cid in
                              group.clients.items()],
            "subscriptionTable": group.subscriptions, "consumeType": group.consume_type,
            "messageModel": group.message_model,
            "consumeFromWhere": group.consume_from_where}))

    def producer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The connections whose heartbeats named the producer group (mqadmin
        producerConnection)."""
        group = cmd.ext["producerGroup"]
        conns = [c for c in self.broker.client_connections()
                 if c.is_open and group in c.attrs.get("producer_groups", ())]
        if not conns:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the producer group[{group}] not exist")
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"connectionSet": [
            {"clientId": c.attrs.get("client_id", c.peer), "clientAddr": c.peer,
             "language": c.attrs.get("language", "JAVA"), "version": c.attrs.get("version", 0)}
            for c in conns]}))

    def query_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        topic, group, qid = ext["topic"], ext["consumerGroup"], int(ext["queueId"])
        off = self.offsets.query(topic, group, qid)
        if off is None:
            if self.store.min_offset_in_queue(topic, qid) <= 0:
                off = 0  # the queue still starts at 0: a new group may read it all
            else:
                return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def update_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        self.offsets.commit(ext["topic"], ext["consumerGroup"], int(ext["queueId"]),
                            int(ext["commitOffset"]))
        return cmd.response(ResponseCode.SUCCESS)

    def _lock_request(self, cmd: RemotingCommand) -> tuple[str, str, list[dict[str, Any]]]:
        """(group, client id, the queues asked for that this broker has): a lock is
        kept per queue, so only real queues are."""
        req = json_object(cast(bytes, cmd.body), "the lock request")
        queues = []
        for mq in objects(req.get("mqSet"), "mqSet"):
            tc = self.broker.topics.get(text(mq, "topic", "a queue"))
            if tc is not None and 0 <= queue_id(mq, "a queue") < tc.readQueueNums:
                queues.append(mq)
        return (text(req, "consumerGroup", "the lock request"),
                text(req, "clientId", "the lock request"), queues)

    def lock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ok = self.consumers.lock(*self._lock_request(cmd))
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"lockOKMQSet": ok}))

    def unlock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.consumers.unlock(*self._lock_request(cmd))
        return cmd.response(ResponseCode.SUCCESS)
