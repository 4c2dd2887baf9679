"""The broker: the one place that wires the store, the replication mode, the request
processors and the name servers, and keeps their lifecycle.

Every request handler answers with RocketMQ's response codes and a remark saying what went
wrong; a bad request never takes the broker down.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Awaitable, cast

from .. import __version__
from ..metrics.serving import port_of, serve as serve_metrics
from ..peer_auth.core import PeerAuth
from ..peer_auth.remoting import PEER_AUTH, PeerGate
from ..remoting import (
    Connection, RemotingCommand, RemotingServer, ReplyWhen, RequestCode, ResponseCode,
)
from ..remoting.transport import Handler, Reply
from ..store import MessageStore, StoreConfig, StoreError
from ..wire.message import MessageFormatError, StoredMessage, pack_host
from .access.acl_file import AclFile
from .access.rules import RULES as ACL_RULES
from .config import BrokerConfig
from .delivery.rounds import run_rounds
from .delivery.schedule import ScheduleService
from .delivery.timer import TimerService
from .delivery.transactions import Transactions
from .long_poll import PullHolds
from .meta.consumers import ConsumerManager
from .meta.creation_limit import CreationLimit
from .meta.offsets import ConsumerOffsets
from .meta.subgroups import SubscriptionGroups
from .meta.topic_table import TopicTable
from .meta.topics import Topics
from .metrics import BrokerStats, registry_for
from .modes import ReplicationMode, mode_class
from .modes.client_handover import last_heard
from .name_server_link import NameServerLink
from .pop.service import PopService
from .processors import PROCESSORS
from .processors.refusal_codes import REMOTING_CODES
from .refusals import Refused
from .replica_lag import LogBoundaries
from .request_timing import timed

if TYPE_CHECKING:
    from .grpc.channel import ClientChannel
    from .grpc.server import GrpcEndpoint

log = logging.getLogger(__name__)

# these only from a peer that proved the cluster secret (clusterSecret), ACL or not; an
# operator's END_HA_RECOVERY is an admin request besides (the client ACL applies)
AUTHENTICATED_CODES = frozenset({RequestCode.CONTROL_PROMOTE, RequestCode.END_HA_RECOVERY,
                                 RequestCode.CLIENTS_CANNOT_REACH_LEADER})
# the cluster's own protocols: no client account, the cluster secret when ACL is on
PEER_CODES = frozenset(code for code, rule in ACL_RULES.items() if rule.peer)
PEER_CODES_CLOSED = ("this broker has aclEnable=true and no cluster secret: the cluster's own "
                     "requests (promotion, epoch caches) are refused; set clusterSecretFile on "
                     "every server of the cluster")


class Broker:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig, *,
                 standalone: bool = False):
        """`standalone`: a single broker with no HA port (`ledgermq dev`), unless the
        config asks for a replication design."""
        self.config = config
        self.store_host = pack_host(config.brokerIP1, config.listenPort)
        self.store = MessageStore(store_config, store_host=self.store_host,
                                  dispatch_follows_log=not config.replicated_log)
        # the cluster secret: what this broker proves to its peers and asks of them
        self.peer_auth = PeerAuth(config.cluster_secret)
        self.peer_gate = PeerGate(self.peer_auth, "broker")
        self.mode: ReplicationMode = mode_class(config, standalone)(self)
        root = store_config.root / "config"
        self.namesrv = NameServerLink(self)
        named = ((config.brokerClusterName, 16, config.clusterTopicEnable),
                 (config.brokerName, 1, config.brokerTopicEnable))
        self.topics = Topics(TopicTable(root / "topics.json", config.defaultTopicQueueNums,
                                        config.autoCreateTopicEnable, named),
                             self.store, config.autoCreateTopicEnable,
                             is_slave=lambda: self.mode.is_slave, announce=self.namesrv.announce,
                             limit=CreationLimit(config.maxTopicsCreatedPerMinute, "topic",
                                                 "maxTopicsCreatedPerMinute"))
        self.offsets = ConsumerOffsets(root / "consumerOffset.json")
        self.subgroups = SubscriptionGroups(root / "subscriptionGroup.json",
                                            config.autoCreateSubscriptionGroup,
                                            config.maxReconsumeTimes,
                                            CreationLimit(config.maxGroupsCreatedPerMinute,
                                                          "group", "maxGroupsCreatedPerMinute"))
        self.schedule = ScheduleService(self.store, config.delay_levels_ms,
                                        root / "delayOffset.json",
                                        append=self.mode.write_internal,
                                        active=lambda: self.mode.is_writable)
        self.consumers = ConsumerManager(config.clientChannelMaxIdleTimeSeconds)
        self.transactions = Transactions(self)
        self.timer = TimerService(self)
        self.pop = PopService(self)
        self.stats = BrokerStats(histograms=config.metrics_on)
        # requests are timed, by protocol, only while metrics are served (request_timing)
        self.handle: Handler = self._handle
        self.handle_grpc: Handler = self._handle
        if config.metrics_on:
            self.handle = timed(self._handle, self.stats.rpc["remoting"])
            self.handle_grpc = timed(self._handle, self.stats.rpc["grpc"])
        self.grpc: GrpcEndpoint | None = None
        if config.grpcServerPort >= 0:  # grpc is imported only by brokers that serve it
            from .grpc.server import GrpcEndpoint
            self.grpc = GrpcEndpoint(self)
        self.server = RemotingServer(self.handle, config.bindAddress, config.listenPort,
                                     max_frame=config.maxFrameSize,
                                     idle_timeout=config.clientChannelMaxIdleTimeSeconds,
                                     tls=config.tls, what="broker",
                                     max_in_flight=config.maxInFlightRequestsPerConnection)
        self.acl = AclFile(Path(config.aclFile) if config.aclFile else
                           store_config.root / "config" / "plain_acl.yml") \
            if config.aclEnable else None
        if self.acl is not None and not self.peer_gate.auth.enabled:
            log.warning(PEER_CODES_CLOSED)
        self.holds: PullHolds | None = None
        self.metrics_server: asyncio.Server | None = None  # while metricsPort is set
        # where the log ended over time, for replica lag in seconds (metrics only)
        self.log_bounds = LogBoundaries(self.store) if config.metrics_on else None
        self._tasks: list[asyncio.Task[None]] = []
        self.started_at = time.time()
        self._client_left_at = float("-inf")  # (client_left_at)
        self._handlers: dict[int, Handler] = {}
        for processor in PROCESSORS:
            self._handlers.update(processor(self).handlers())
        self._handlers.update(self.mode.handlers())
        self._handlers[PEER_AUTH] = self.peer_gate.serve

    @property
    def address(self) -> str:
        return f"{self.config.brokerIP1}:{self.server.port}"

    @property
    def grpc_port(self) -> int | None:
        return self.grpc.port if self.grpc is not None else None

    @property
    def grpc_address(self) -> str:
        return f"{self.config.brokerIP1}:{self.grpc_port}"

    def client_connections(self) -> list[Connection | ClientChannel]:
        """Every client connected now: remoting connections and RocketMQ 5 (gRPC) ones."""
        grpc = self.grpc.service.connections() if self.grpc is not None else []
        return list(self.server.connections) + grpc

    # ---- what the mode asks of its host ---------------------------------------------
    async def role_changed(self) -> None:
        self.pop.reset()  # a new master starts from the committed offsets
        if self.mode.is_writable:  # a new master serves every topic its log holds
            self.topics.adopt_stored()
        await self.namesrv.reregister()
        if self.mode.is_writable:  # the route names it now: its consumers may come
            self.consumers.announce_master(self.config.brokerName, self.address)

    async def master_ha_address(self) -> str | None:
        return await self.namesrv.master_ha_address()

    async def master_address(self) -> str | None:
        return await self.namesrv.master_address()

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.holds = PullHolds(loop)
        # with a replicated log, consumers see only what replication confirmed: the mode
        # moves the bound from 0
        bound = (0,) if self.config.replicated_log else ()
        report = await loop.run_in_executor(None, self.store.open, *bound)
        self.store.listeners.append(self.holds.notify)
        await self.mode.prepare()
        if report.crashed:
            log.warning("store recovered after a crash: %s", report)
        await self.server.start()
        if self.config.listenPort == 0:  # an ephemeral port: advertise the real one
            self.config.listenPort = self.server.port
            self.store.store_host = self.store_host = pack_host(self.config.brokerIP1,
                                                                self.server.port)
        await self.mode.start()
        if self.config.metrics_on:
            self.metrics_server = await serve_metrics(registry_for(self),
                                                      self.config.bindAddress,
                                                      self.config.metrics_port)
            log.info("metrics on http://%s:%d/metrics", self.config.bindAddress,
                     self.metrics_port)
        if self.grpc is not None:
            port = await self.grpc.start(self.config.bindAddress, self.config.grpcServerPort)
            log.info("gRPC (RocketMQ 5 clients) on %s:%d", self.config.bindAddress, port)
        await self.namesrv.register()  # routes exist once start() returns
        loops = [self.namesrv.register_loop(), self.namesrv.sync_loop(), self._housekeeping(),
                 self.schedule.run(), self.transactions.run(), self.timer.run(),
                 self.pop.run()]
        if self.log_bounds is not None:
            loops.append(self.log_bounds.run())
        self._tasks = [asyncio.create_task(t) for t in loops]
        log.info("broker %s (%s, %s mode) listening on %s", self.config.brokerName,
                 self.config.brokerRole.value, self.mode.name, self.address)

    @property
    def metrics_port(self) -> int | None:
        return port_of(self.metrics_server)

    async def stop(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.namesrv.unregister()
        if self.grpc is not None:
            await self.grpc.stop()
        await self.server.stop()
        await self.mode.stop()
        await self.namesrv.close()
        self.offsets.save()
        self.schedule.save()
        await asyncio.get_running_loop().run_in_executor(None, self.store.close)

    async def _housekeeping(self) -> None:
        async def save_and_expire() -> bool:
            await self.offsets.save_off_loop()
            self.consumers.expire()
            return False
        await run_rounds("housekeeping", self.config.flushConsumerOffsetInterval / 1000,
                         save_and_expire)

    def runtime_info(self) -> dict[str, str]:
        info = {k: str(v) for k, v in self.store.runtime_info().items()}
        info.update({"brokerName": self.config.brokerName,
                     "brokerVersionDesc": f"ledgermq {__version__}",
                     "brokerAddr": self.address, "bootTimestamp": str(int(self.started_at * 1000)),
                     "topicCount": str(len(self.topics.table.topics)),
                     "consumerGroups": str(len(self.consumers.groups)),
                     "heldPulls": str(self.holds.held if self.holds else 0),
                     "connections": str(len(self.server.connections))})
        info.update(self.mode.runtime_info())
        return info

    # ---- dispatch -------------------------------------------------------------------
    def _handle(self, cmd: RemotingCommand, conn: Connection
                ) -> Reply | Awaitable[Reply] | ReplyWhen:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f"request code {cmd.code} is not supported by this broker")
        refused = self._peer_refusal(cmd, conn) if cmd.code in AUTHENTICATED_CODES or \
            self.acl is not None and cmd.code in PEER_CODES else None
        if refused is not None:
            return refused
        if self.acl is not None and cmd.code not in PEER_CODES:
            why = self._acl_refusal(cmd, conn)
            if why is not None:
                self.stats.acl_denied[cmd.code] += 1
                return cmd.response(ResponseCode.NO_PERMISSION, why)
        if not conn.attrs.get("watched"):
            conn.attrs["watched"] = True
            conn.closed.add_done_callback(lambda _: self._connection_closed(conn))
        try:
            result = handler(cmd, conn)
        except (Refused, KeyError, ValueError) as e:
            return self._bad_request(cmd, e)
        if type(result) is not RemotingCommand and type(result) is not ReplyWhen and \
                asyncio.iscoroutine(result):
            return self._guard(cmd, result)
        return result

    def _connection_closed(self, conn: Connection) -> None:
        self.consumers.connection_closed(conn)
        # (a gRPC channel's end is no such sign: it says nothing of who ended it)
        if not getattr(conn, "closed_by_us", True) and last_heard(conn) is not None:
            self._client_left_at = max(self._client_left_at, conn.last_active)

    @property
    def client_left_at(self) -> float:
        return self._client_left_at

    def _peer_refusal(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        """A cluster server's own request: only from a peer that proved the cluster
        secret; with ACL on and no secret set, never (said at start-up)."""
        if cmd.code == PEER_AUTH:
            return None  # the proof itself
        if self.acl is not None and not self.peer_gate.auth.enabled:
            return cmd.response(ResponseCode.NO_PERMISSION, PEER_CODES_CLOSED)
        return self.peer_gate.refusal(cmd, conn)

    def _acl_refusal(self, cmd: RemotingCommand, conn: Connection) -> str | None:
        assert self.acl is not None  # (asked only with ACL on)
        acl, account = self.acl.current(), getattr(conn, "acl_account", None)
        body = cast(bytes, cmd.body)  # (a request's)
        if account is not None:  # a gRPC call, authenticated by its endpoint
            return acl.permission(account, cmd.code, cmd.ext, body, self._message_at)
        return acl.check(cmd.code, cmd.ext, body, conn.peer.rsplit(":", 1)[0],
                         self._message_at)

    def _message_at(self, offset: int) -> StoredMessage | None:
        """The stored message at a commit-log offset, or None (the ACL's look-up)."""
        try:
            return self.store.message_at(offset)
        except (StoreError, MessageFormatError, ValueError):
            return None

    async def _guard(self, cmd: RemotingCommand, coro: Awaitable[Reply]) -> Reply:
        try:
            return await coro
        except (Refused, KeyError, ValueError) as e:
            return self._bad_request(cmd, e)

    @staticmethod
    def _bad_request(cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        code = REMOTING_CODES[e.kind] if isinstance(e, Refused) else ResponseCode.SYSTEM_ERROR
        return cmd.response(code, f"bad request (code {cmd.code}): {what}")
