"""Admin operations (mqadmin's names): topics, routes, clusters, broker status, consumer
progress and message lookups."""
from __future__ import annotations

import json
from typing import Any, cast

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..wire.message import decode_offset_msg_id
from .instance import ClientInstance, MQClientError, TlsOption, loads_lenient
from .message import MessageExt, MessageQueue, decode_pulled
from .pull import PullConsumer, PullStatus


TOOLS_GROUP = "TOOLS_CONSUMER"  # the group RocketMQ's tools read as


class Admin:
    def __init__(self, namesrv: str, instance: ClientInstance | None = None, *,
                 tls: TlsOption = None) -> None:
        """`tls`: True, False, an SSLContext, or None (LEDGERMQ_TLS decides)."""
        self.instance = instance or ClientInstance(namesrv, tls=tls)

    async def close(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> "Admin":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @staticmethod
    def _ok(resp: RemotingCommand) -> RemotingCommand:
        if resp.code != ResponseCode.SUCCESS:
            raise MQClientError(resp.code, resp.remark)
        return resp

    async def _ns(self, code: int, **ext: str) -> dict[str, Any]:
        resp = self._ok(await self.instance.namesrv_request(RemotingCommand(code, ext=ext)))
        doc: dict[str, Any] = loads_lenient(cast(bytes, resp.body)) if resp.body else {}
        return doc

    async def _broker(self, addr: str, code: int, body: bytes = b"",
                      **ext: object) -> RemotingCommand:
        return self._ok(await self.instance.broker_request(
            addr, RemotingCommand(code, ext={k: str(v) for k, v in ext.items()}, body=body)))

    async def topic_list(self) -> list[str]:
        topics: list[str] = (await self._ns(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))[
            "topicList"]
        return topics

    async def topic_route(self, topic: str) -> dict[str, Any]:
        return await self._ns(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)

    async def cluster_list(self) -> dict[str, Any]:
        return await self._ns(RequestCode.GET_BROKER_CLUSTER_INFO)

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        info = await self.cluster_list()
        names = info["clusterAddrTable"].get(cluster, []) if cluster else \
            list(info["brokerAddrTable"])
        out = {}
        for name in names:
            addrs = info["brokerAddrTable"][name]["brokerAddrs"]
            if "0" in addrs:
                out[name] = addrs["0"]
        return out

    async def update_topic(self, topic: str, *, broker: str | None = None,
                           cluster: str | None = None, read_queues: int = 8,
                           write_queues: int = 8, perm: int = 6, order: bool = False,
                           attributes: str = "") -> list[str]:
        """Create or update a topic on one broker or on every master of a cluster;
        `attributes` as RocketMQ's `updateTopic -a` ("+message.type=FIFO")."""
        targets = [broker] if broker else list((await self.master_addrs(cluster)).values())
        if not targets:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "no broker to create the topic on")
        for addr in targets:
            await self._broker(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, topic=topic,
                               defaultTopic="TBW102", readQueueNums=read_queues,
                               writeQueueNums=write_queues, perm=perm,
                               topicFilterType="SINGLE_TAG", topicSysFlag=0,
                               order=str(order).lower(), attributes=attributes)
        return targets

    async def topic_config(self, addr: str, topic: str) -> dict[str, Any] | None:
        """The topic's config on broker `addr` (RocketMQ's examineTopicConfig); None when
        that broker does not have it."""
        try:
            r = await self._broker(addr, RequestCode.GET_TOPIC_CONFIG, topic=topic)
        except MQClientError as e:
            if e.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            raise
        doc: dict[str, Any] = loads_lenient(cast(bytes, r.body))
        return doc

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete a topic on every master holding it (of `cluster`, when given), then from
        every name server's routes. The brokers it was deleted on."""
        route = await self.topic_route(topic)
        names = {q["brokerName"] for q in route.get("queueDatas", [])}
        masters = await self.master_addrs(cluster)
        targets = [masters[n] for n in sorted(names) if n in masters]
        for addr in targets:
            await self._broker(addr, RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic)
        for ns in self.instance.namesrvs:
            self._ok(await self.instance.remoting.invoke(ns, RemotingCommand(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, ext={"topic": topic}),
                self.instance.request_timeout))
        return targets

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        """Per queue of the topic on every master holding it: min and max offset."""
        route = await self.topic_route(topic)
        names = {q["brokerName"] for q in route.get("queueDatas", [])}
        masters = await self.master_addrs()
        rows = []
        for name in sorted(names & set(masters)):
            r = await self._broker(masters[name], RequestCode.GET_TOPIC_STATS_INFO, topic=topic)
            rows += json.loads(cast(bytes, r.body))["offsetTable"]
        return sorted(rows, key=lambda r: (r["brokerName"], r["queueId"]))

    # ---- consumer groups -----------------------------------------------------------
    async def _targets(self, broker: str | None, cluster: str | None) -> list[str]:
        targets = [broker] if broker else list((await self.master_addrs(cluster)).values())
        if not targets:
            raise MQClientError(ResponseCode.SYSTEM_ERROR, "no broker master to ask")
        return targets

    async def update_sub_group(self, config: dict[str, Any], *, broker: str | None = None,
                               cluster: str | None = None) -> list[str]:
        """Create or update a subscription group (RocketMQ's field names) on one broker or
        on every master of a cluster."""
        body = json.dumps(config).encode()
        targets = await self._targets(broker, cluster)
        for addr in targets:
            await self._broker(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body)
        return targets

    async def delete_sub_group(self, group: str, *, broker: str | None = None,
                               cluster: str | None = None) -> list[str]:
        targets = await self._targets(broker, cluster)
        for addr in targets:
            await self._broker(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName=group)
        return targets

    async def sub_groups(self, group: str | None = None) -> dict[str, dict[str, Any]]:
        """Every master's subscription group configs (or one group's), by broker name."""
        out = {}
        for name, addr in (await self.master_addrs()).items():
            r = await self._broker(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            table = json.loads(cast(bytes, r.body))["subscriptionGroupTable"]
            out[name] = {g: c for g, c in table.items() if group is None or g == group}
        return out

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int,
                           force: bool = True) -> list[dict[str, Any]]:
        """Move `group`'s offsets on `topic` to the first message stored at or after the
        time (-1: to the end) on every master holding the topic; running push consumers
        of the group jump too. Without `force`, queues only move back. The new offsets."""
        route = await self.topic_route(topic)
        names = {q["brokerName"] for q in route.get("queueDatas", [])}
        masters = await self.master_addrs()
        rows = []
        for name in sorted(names):
            if name not in masters:
                raise MQClientError(ResponseCode.SYSTEM_ERROR, f"broker {name} has no master")
            r = await self._broker(masters[name], RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                   topic=topic, group=group, timestamp=timestamp_ms,
                                   isForce=str(force).lower())
            rows += json.loads(cast(bytes, r.body))["offsetTable"]
        return rows

    async def broker_epoch(self, addr: str) -> dict[str, Any]:
        """Controller mode: a broker's role, offsets and EpochFile."""
        r = await self._broker(addr, RequestCode.GET_BROKER_EPOCH_CACHE)
        epoch: dict[str, Any] = json.loads(cast(bytes, r.body))
        return epoch

    async def broker_status(self, addr: str) -> dict[str, str]:
        resp = await self._broker(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        table: dict[str, str] = json.loads(cast(bytes, resp.body))["table"]
        return table

    async def consumer_progress(self, group: str,
                                topic: str | None = None) -> list[dict[str, Any]]:
        rows = []
        for addr in (await self.master_addrs()).values():
            ext = {"consumerGroup": group}
            if topic:
                ext["topic"] = topic
            resp = await self._broker(addr, RequestCode.GET_CONSUME_STATS, b"", **ext)
            rows += json.loads(cast(bytes, resp.body))["offsetTable"]
        for r in rows:
            r["diff"] = r["brokerOffset"] - max(r["consumerOffset"], 0)
        return sorted(rows, key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))

    async def consumer_connections(self, group: str) -> list[dict[str, Any]]:
        """The group's online members on every master: client id, address, subscriptions."""
        out = []
        for name, addr in (await self.master_addrs()).items():
            resp = await self.instance.broker_request(addr, RemotingCommand(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, ext={"consumerGroup": group}))
            if resp.code == ResponseCode.SUCCESS:
                info = json.loads(cast(bytes, resp.body))
                out += [{**c, "brokerName": name, "consumeType": info.get("consumeType"),
                         "messageModel": info.get("messageModel"),
                         "subscriptions": sorted(info.get("subscriptionTable") or {})}
                        for c in info["connectionSet"]]
        return out

    async def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By the broker's offset message id (where it is stored) or, failing that, by the
        client's msgId (its UNIQ_KEY) in `topic`, or in every topic when none is given."""
        host, port, offset = decode_offset_msg_id(msg_id)  # both ids are hex of one length
        if 0 < port < 65536:  # a client msgId decodes to a process id where a port would be
            resp = await self._broker(f"{host}:{port}", RequestCode.VIEW_MESSAGE_BY_ID,
                                      offset=offset)
            msgs = decode_pulled(cast(bytes, resp.body), MessageQueue("", f"{host}:{port}", -1))
            if msgs:
                return msgs[0]
        for t in [topic] if topic else await self.topic_list():
            for m in await self.query_msg_by_key(t, msg_id):
                if m.msg_id == msg_id:
                    return m
        raise MQClientError(ResponseCode.QUERY_NOT_FOUND, f"no message {msg_id}")

    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 64) -> list[MessageExt]:
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise MQClientError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        out = []
        for name, addrs in route.brokers().items():
            addr = addrs.get(0) or next(iter(addrs.values()))
            resp = await self.instance.broker_request(addr, RemotingCommand(
                RequestCode.QUERY_MESSAGE, ext={"topic": topic, "key": key,
                                                "maxNum": str(max_num), "beginTimestamp": "0",
                                                "endTimestamp": str(1 << 62)}))
            if resp.code == ResponseCode.SUCCESS:
                out += decode_pulled(cast(bytes, resp.body), MessageQueue(topic, name, -1))
        return out

    async def messages_by_time(self, topic: str, broker_name: str, queue_id: int,
                               timestamp_ms: int, count: int = 16) -> list[MessageExt]:
        """Up to `count` messages of one queue, from the first stored at or after the time
        (mqadmin's queryMsgByOffset after searchOffset; pulled as TOOLS_CONSUMER, which
        commits nothing)."""
        reader = PullConsumer(TOOLS_GROUP, instance=self.instance)
        mq = MessageQueue(topic, broker_name, queue_id)
        offset = await reader.search_offset(mq, timestamp_ms)
        got = await reader.pull(mq, offset, count)
        return got.messages if got.status is PullStatus.FOUND else []
