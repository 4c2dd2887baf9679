"""The name server: brokers register and heartbeat here; clients look up topic routes."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import ClassVar

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from ..metrics.serving import gauge, serve as serve_metrics
from ..remoting import Connection, RemotingCommand, RemotingServer, RequestCode, ResponseCode
from ..remoting.tls import DISABLED, Tls
from ..runtime.config import check, positive
from .routes import RouteTable

log = logging.getLogger(__name__)


@dataclass
class NamesrvConfig:
    listenPort: int = field(default=9876, metadata=check(lambda v: None if 0 <= v < 65536
                                                          else "must be a TCP port"))
    bindAddress: str = "127.0.0.1"
    brokerChannelExpiredTime: float = field(default=120.0, metadata=check(positive))  # s
    scanNotActiveBrokerInterval: float = field(default=5.0, metadata=check(positive))  # s
    maxFrameSize: int = field(default=16 << 20, metadata=check(positive))
    clientChannelMaxIdleTimeSeconds: float = field(default=120.0, metadata=check(positive))
    metricsPort: int = field(default=0, metadata=check(lambda v: None if 0 <= v < 65536
                                                        else "must be a TCP port"))
    tls: ClassVar[Tls] = DISABLED  # from the tls.* keys


def json_body(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class NamesrvCollector(Collector):
    """What a name server knows, at scrape time."""

    def __init__(self, ns: "NameServer"):
        self.ns = ns

    def collect(self):
        r = self.ns.routes
        addrs = sum(len(bd.brokerAddrs) for bd in r.brokers.values())
        yield gauge("ledgermq_namesrv_broker_groups", "Broker groups (brokerName) registered.",
                    [], [], len(r.brokers))
        yield gauge("ledgermq_namesrv_brokers", "Broker addresses registered.", [], [], addrs)
        yield gauge("ledgermq_namesrv_topics", "Topics with a route.", [], [],
                    len(r.topic_queues))


class NameServer:
    def __init__(self, config: NamesrvConfig | None = None):
        self.config = config or NamesrvConfig()
        self.routes = RouteTable(self.config.brokerChannelExpiredTime)
        self.kv: dict[tuple[str, str], str] = {}
        self.server = RemotingServer(self.handle, self.config.bindAddress,
                                     self.config.listenPort, max_frame=self.config.maxFrameSize,
                                     idle_timeout=self.config.clientChannelMaxIdleTimeSeconds,
                                     tls=self.config.tls, what="name server")
        self._scanner: asyncio.Task | None = None
        self.metrics_server: asyncio.Server | None = None
        self.controller = None  # enableControllerInNamesrv: serves the controller's codes
        self._handlers = {
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topics_by_cluster,
            RequestCode.PUT_KV_CONFIG: self._put_kv,
            RequestCode.GET_KV_CONFIG: self._get_kv,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
        }

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        if self.controller is not None:
            await self.controller.start()
        await self.server.start()
        if self.config.metricsPort:
            reg = CollectorRegistry(auto_describe=False)
            reg.register(NamesrvCollector(self))
            self.metrics_server = await serve_metrics(reg, self.config.bindAddress,
                                                      self.config.metricsPort)
        self._scanner = asyncio.create_task(self._scan_brokers())
        log.info("name server listening on %s", self.address)

    async def stop(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.close()
        if self._scanner:
            self._scanner.cancel()
        await self.server.stop()
        if self.controller is not None:
            await self.controller.stop()

    async def _scan_brokers(self) -> None:
        while True:
            await asyncio.sleep(self.config.scanNotActiveBrokerInterval)
            for addr in self.routes.expire(time.monotonic()):
                log.warning("broker %s expired: no heartbeat for %.0fs", addr,
                            self.config.brokerChannelExpiredTime)

    def handle(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        handler = self._handlers.get(cmd.code)
        if handler is None and self.controller is not None:
            return self.controller.handle(cmd, conn)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f"request code {cmd.code} is not supported by the name server")
        try:
            return handler(cmd, conn)
        except (KeyError, ValueError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad request: {type(e).__name__}: {e}")

    # ---- brokers --------------------------------------------------------------------
    def _register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        body = json.loads(cmd.body) if cmd.body else {}
        wrapper = body.get("topicConfigSerializeWrapper", {})
        addr = ext["brokerAddr"]
        out = self.routes.register(
            cluster=ext["clusterName"], broker_name=ext["brokerName"], broker_addr=addr,
            broker_id=int(ext["brokerId"]), ha_server_addr=ext.get("haServerAddr", ""),
            topics=wrapper.get("topicConfigTable", {}),
            data_version=wrapper.get("dataVersion", {}), now=time.monotonic(),
            grpc_addr=ext.get("grpcServerAddr", ""))
        conn.attrs.setdefault("brokers", set()).add(addr)
        if not conn.attrs.get("watched"):
            conn.attrs["watched"] = True
            conn.closed.add_done_callback(lambda _: self._connection_gone(conn))
        return cmd.response(ResponseCode.SUCCESS, None, out)

    def _connection_gone(self, conn: Connection) -> None:
        for addr in conn.attrs.get("brokers", ()):
            if self.routes.unregister(addr):
                log.warning("broker %s disconnected: routes to it removed", addr)

    def _unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.routes.unregister(cmd.ext["brokerAddr"])
        return cmd.response(ResponseCode.SUCCESS)

    def _query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        live = self.routes.live.get(cmd.ext.get("brokerAddr", ""))
        changed = live is None or (json.loads(cmd.body) if cmd.body else {}) != live.data_version
        if live is not None:
            live.last_update = time.monotonic()
        return cmd.response(ResponseCode.SUCCESS, None, {"changed": str(changed).lower()},
                            json_body(live.data_version) if live else b"")

    # ---- clients --------------------------------------------------------------------
    def _route(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = cmd.ext["topic"]
        route = self.routes.route(topic)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}")
        order_conf = self.kv.get(("ORDER_TOPIC_CONFIG", topic))
        if order_conf:
            route["orderTopicConf"] = order_conf
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(route))

    def _cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(self.routes.cluster_info()))

    def _topic_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json_body({"topicList": self.routes.topics()}))

    def _topics_by_cluster(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        names = self.routes.clusters.get(cmd.ext["cluster"], set())
        topics = [t for t, q in self.routes.topic_queues.items() if names & set(q)]
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"topicList": sorted(topics)}))

    def _delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.routes.topic_queues.pop(cmd.ext["topic"], None)
        return cmd.response(ResponseCode.SUCCESS)

    def _put_kv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.kv[(cmd.ext["namespace"], cmd.ext["key"])] = cmd.ext["value"]
        return cmd.response(ResponseCode.SUCCESS)

    def _get_kv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        value = self.kv.get((cmd.ext["namespace"], cmd.ext["key"]))
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {cmd.ext['namespace']} "
                                f"Key: {cmd.ext['key']}")
        return cmd.response(ResponseCode.SUCCESS, None, {"value": value})

    def _delete_kv(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.kv.pop((cmd.ext["namespace"], cmd.ext["key"]), None)
        return cmd.response(ResponseCode.SUCCESS)
