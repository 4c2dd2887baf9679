"""Consumer groups as operators manage them: subscription group configs (create or update,
list, delete) and offset resets by time or to the end, which running push consumers of
the group are told about so they jump too (RocketMQ's AdminBrokerProcessor, these
request codes)."""
from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

from ...remoting import Connection, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ...remoting.transport import Handler
from ..json_bodies import json_object
from ..meta.subgroups import SubscriptionGroupConfig
from ..name_server_link import HANDED_BY_MASTER, handed_by_peer, json_body
from ..queue_tables import queue_table

if TYPE_CHECKING:
    from ..broker import Broker

TO_END = -1  # resetOffset timestamp: every queue to its end (skipAccumulatedMessage)


def reset_body(table: list[dict[str, Any]], language: str) -> bytes:
    """RESET_CONSUMER_CLIENT_OFFSET's body as the client's language reads it (a list of
    {topic, brokerName, queueId, offset}: RocketMQ's ResetOffsetBodyForC)."""
    return queue_table(table, language)


class GroupAdminProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.groups = broker.subgroups

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_one,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }

    def _refused(self, cmd: RemotingCommand, conn: Connection,
                 handed: bool = False) -> RemotingCommand | None:
        """Changes go to the group's master (followers copy its table and, with `handed`,
        take the group configs it hands them)."""
        why = self.broker.mode.refuse_write()
        if why is None or (handed and handed_by_peer(self.broker, cmd, conn)):
            return None
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, why)

    async def _hand_to_group(self, cmd: RemotingCommand, ext: dict[str, str],
                             body: bytes = b"") -> None:
        """A change made on the master reaches the group's other brokers before it is
        answered (a failover right after keeps it), unless it is itself one handed over."""
        if HANDED_BY_MASTER not in cmd.ext and self.broker.mode.is_writable:
            await self.broker.namesrv.hand_to_group(cmd.code, ext, body)

    async def update(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if (r := self._refused(cmd, conn, handed=True)) is not None:
            return r
        try:
            cfg = SubscriptionGroupConfig.from_json(json_object(cast(bytes, cmd.body),
                                                                "the group config"))
        except (ValueError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad subscription group: {e}")
        # (the table is saved, with its fsync, on a worker thread)
        await asyncio.get_running_loop().run_in_executor(None, self.groups.put, cfg)
        await self._hand_to_group(cmd, {}, json_body(asdict(cfg)))
        return cmd.response(ResponseCode.SUCCESS)

    def get_all(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(self.groups.to_json()))

    def get_one(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """One group's config, made on first use where `autoCreateSubscriptionGroup` allows
        (as a consumer's first pull would): RocketMQ's proxy reads a group's retry and
        order settings this way."""
        group = cmd.ext["group"]
        cfg = self.groups.for_consumer(group)
        if cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group[:128]}] does not exist")
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(asdict(cfg)))

    async def delete(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if (r := self._refused(cmd, conn, handed=True)) is not None:
            return r
        group = cmd.ext["groupName"]
        if not self.groups.delete(group) and not handed_by_peer(self.broker, cmd, conn):
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{group}] does not exist")
        await self._hand_to_group(cmd, {"groupName": group})
        return cmd.response(ResponseCode.SUCCESS)

    def reset_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Per queue of the topic: the first message stored at or after `timestamp` (ms;
        -1: the queue's end). Without `isForce` a queue is only moved back, never past
        what the group has not consumed yet (RocketMQ's rule)."""
        if (r := self._refused(cmd, conn)) is not None:
            return r
        ext, b = cmd.ext, self.broker
        topic, group = ext["topic"], ext["group"]
        ts, force = int(ext["timestamp"]), str(ext.get("isForce", "false")).lower() == "true"
        tc = b.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table: list[dict[str, Any]] = []
        for qid in range(tc.readQueueNums):
            found = b.store.max_offset_in_queue(topic, qid) if ts == TO_END else \
                b.store.offset_by_time(topic, qid, ts)
            committed = b.offsets.query(topic, group, qid)
            offset = found if force or committed is None or found < committed else committed
            b.offsets.commit(topic, group, qid, offset)
            table.append({"topic": topic, "brokerName": b.config.brokerName, "queueId": qid,
                          "offset": offset})
        b.offsets.save()
        self._tell_consumers(group, topic, ts, force, table)
        # (as the caller's language reads it: RocketMQ's Java tools want a map keyed by queue)
        return cmd.response(ResponseCode.SUCCESS, None, None, queue_table(table, cmd.language))

    def _tell_consumers(self, group: str, topic: str, ts: int, force: bool,
                        table: list[dict[str, Any]]) -> None:
        g = self.broker.consumers.groups.get(group)
        for c in list(g.clients) if g else []:
            if not c.is_open:
                continue
            body = reset_body(table, c.attrs.get("language", "JAVA"))
            try:
                c.oneway(RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext={
                    "topic": topic, "group": group, "timestamp": str(ts),
                    "isForce": str(force).lower()}, body=body))
            except RemotingError:
                pass  # gone: it reads the committed offsets when it comes back
