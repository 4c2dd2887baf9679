"""The broker: the one place that wires the store, the remoting server and the name server.

Every request handler answers with RocketMQ's response codes and a remark saying what went
wrong; a bad request never takes the broker down.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import time

from ..remoting import (
    Connection, RemotingClient, RemotingCommand, RemotingError, RemotingServer, ReplyWhen,
    RequestCode, ResponseCode,
)
from ..store import GetStatus, MessageStore, PutStatus, StoreConfig, StoreError
from ..wire.message import (
    PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, MessageFormatError, decode_message,
    pack_host,
)
from ..store.store import check_topic
from ..namesrv.routes import PERM_READ, PERM_WRITE
from ..replication.ha import HAConfig, SyncStatus
from ..replication.raft import Code, RaftConfig
from .config import BrokerConfig, BrokerRole
from .dledger import DLedgerDriver, parse_peers
from .replicas import ReplicasManager
from .checkpoint import CheckpointDriver
from .ha import HAMasterDriver, HASlaveDriver
from .consumers import ConsumerManager, parse_subscription
from .long_poll import PullHolds
from .schedule import ScheduleService
from .send import (
    BadRequest, BatchBody, delay_level_of, drop_stored, index_keys, parse_send_header,
    props_from_header, split_batch_body, tags_of, to_schedule, wants_dedup, with_properties,
)
from .state import (
    AUTO_CREATE_TOPIC, DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, ConsumerOffsets, TopicConfig,
    TopicTable,
)

log = logging.getLogger(__name__)

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

# clients that send this language (ledgermq's) understand SEND_PENDING and resolve it
PENDING_AWARE_LANGUAGE = "PYTHON"

_SEND_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
}
_STORED = {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
           PutStatus.SLAVE_NOT_AVAILABLE}

_PULL_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def json_body(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Broker:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig):
        self.config = config
        self.store_host = pack_host(config.brokerIP1, config.listenPort)
        self.store = MessageStore(store_config, store_host=self.store_host,
                                  dispatch_follows_log=not config.replicated_log)
        self.dledger: DLedgerDriver | None = None
        self.ha_master: HAMasterDriver | None = None
        self.ha_slave: HASlaveDriver | None = None
        self._learned_ha_master = ""  # the master's HA address, from the name server
        self.checkpoint: CheckpointDriver | None = None  # S3 mode
        self.replicas: ReplicasManager | None = None  # controller mode (S1)
        root = store_config.root / "config"
        self.topics = TopicTable(root / "topics.json", config.defaultTopicQueueNums,
                                 config.autoCreateTopicEnable)
        self.offsets = ConsumerOffsets(root / "consumerOffset.json")
        self.schedule = ScheduleService(self.store, config.delay_levels_ms,
                                        root / "delayOffset.json",
                                        append=self._append_for_schedule,
                                        active=lambda: self.is_writable_master)
        self.consumers = ConsumerManager(config.clientChannelMaxIdleTimeSeconds)
        self.server = RemotingServer(self.handle, config.bindAddress, config.listenPort,
                                     max_frame=config.maxFrameSize,
                                     idle_timeout=config.clientChannelMaxIdleTimeSeconds)
        self.namesrv_client = RemotingClient()
        self.holds: PullHolds | None = None
        self._tasks: list[asyncio.Task] = []
        self.started_at = time.time()
        self._handlers = {
            RequestCode.SEND_MESSAGE: self._send,
            RequestCode.SEND_MESSAGE_V2: self._send,
            RequestCode.SEND_BATCH_MESSAGE: self._send,
            RequestCode.PULL_MESSAGE: self._pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_consumer_offset,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.UNREGISTER_CLIENT: self._unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._offset_by_time,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self._earliest_time,
            RequestCode.VIEW_MESSAGE_BY_ID: self._view_by_id,
            RequestCode.QUERY_MESSAGE: self._query_message,
            RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self._update_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self._delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self._all_topic_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self._runtime_info,
            RequestCode.GET_CONSUME_STATS: self._consume_stats,
            RequestCode.GET_TOPIC_STATS_INFO: self._topic_stats,
            RequestCode.LOCK_BATCH_MQ: self._lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self._unlock_batch,
            RequestCode.CHECK_CLIENT_CONFIG: lambda cmd, conn: cmd.response(ResponseCode.SUCCESS),
            RequestCode.GET_ALL_CONSUMER_OFFSET: self._all_consumer_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self._all_delay_offsets,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self._consumer_connections,
            RequestCode.CONTROL_PROMOTE: self._promote,
            RequestCode.GET_BROKER_EPOCH_CACHE: self._epoch_cache,
        }

    @property
    def address(self) -> str:
        return f"{self.config.brokerIP1}:{self.server.port}"

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.holds = PullHolds(loop)
        if self.config.replicated_log:
            # consumers see only what replication confirmed: the drivers move the bound
            report = await loop.run_in_executor(None, self.store.open, 0)
        else:
            report = await loop.run_in_executor(None, self.store.open)
        self.store.listeners.append(self.holds.notify)
        if self.config.enableDLegerCommitLog:
            c = self.config
            self.dledger = DLedgerDriver(
                self.store, c.dLegerSelfId, parse_peers(c.dLegerPeers),
                self.store.config.root / "dledger", self._on_role_change,
                RaftConfig(election_timeout_ms=c.dLegerElectionTimeoutMs,
                           heartbeat_ms=c.dLegerHeartBeatIntervalMs,
                           max_pending_size=c.dLegerMaxPendingSize,
                           max_push_timeout_ms=c.dLegerMaxPushTimeOutMs,
                           quorum_ack_timeout_ms=c.dLegerQuorumAckTimeoutMs),
                preferred_leader=c.preferredLeaderId)
            await self.dledger.start()
        if report.crashed:
            log.warning("store recovered after a crash: %s", report)
        await self.server.start()
        if self.config.listenPort == 0:  # an ephemeral port: advertise the real one
            self.config.listenPort = self.server.port
            self.store.store_host = self.store_host = pack_host(self.config.brokerIP1,
                                                                self.server.port)
        if self.config.enableConsistentCheckpoint:
            self.checkpoint = CheckpointDriver(self)
            await self.checkpoint.start()
        elif self.config.enableControllerMode:
            self.replicas = ReplicasManager(self)
            await self.replicas.start()
        elif self.dledger is None:
            await self._start_classic_ha()
        await self.register_now()  # routes exist once start() returns
        loops = [self._register_loop(), self._housekeeping(), self.schedule.run()]
        if self.dledger is not None or self.ha_slave is not None or \
                self.checkpoint is not None or self.replicas is not None:
            loops.append(self._sync_from_master_loop())
        self._tasks = [asyncio.create_task(t) for t in loops]
        log.info("broker %s (%s) listening on %s", self.config.brokerName,
                 self.config.brokerRole.value, self.address)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._unregister_from_namesrv()
        await self.server.stop()
        if self.dledger is not None:
            await self.dledger.stop()
        if self.checkpoint is not None:
            await self.checkpoint.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        await self._stop_ha()
        await self.namesrv_client.close()
        self.offsets.save()
        self.schedule.save()
        await asyncio.get_running_loop().run_in_executor(None, self.store.close)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.config.flushConsumerOffsetInterval / 1000)
            try:
                self.offsets.save()
                self.consumers.expire()
            except Exception:
                log.exception("housekeeping failed")

    # ---- classic HA (S2) ------------------------------------------------------------
    def ha_config(self, checkpoint: bool = False) -> HAConfig:
        c = self.config
        return HAConfig(segment_size=self.store.config.mappedFileSizeCommitLog,
                        heartbeat_ms=c.haSendHeartbeatInterval,
                        housekeeping_ms=c.haHousekeepingInterval,
                        sync_timeout_ms=self.store.config.syncFlushTimeout,
                        fallbehind_max=c.haSlaveFallbehindMax,
                        transfer_batch=c.haTransferBatchSize, checkpoint=checkpoint)

    @property
    def ha_port(self) -> int:
        return self.ha_master.port if self.ha_master is not None else self.config.ha_port

    async def _start_classic_ha(self) -> None:
        if self.config.brokerRole is BrokerRole.SLAVE:
            self.ha_slave = HASlaveDriver(self.store, self.ha_config(), self._ha_master_addr)
            await self.ha_slave.start()
        else:
            ha = HAMasterDriver(self.store, self.ha_config(), self.config.bindAddress,
                                self.config.ha_port)
            try:
                await ha.start()
            except OSError as e:
                if self.config.brokerRole is BrokerRole.SYNC_MASTER:
                    raise OSError(f"SYNC_MASTER needs its HA port {self.config.ha_port} "
                                  f"(haListenPort): {e}") from None
                # an ASYNC_MASTER without slaves loses nothing by it: say so, keep serving
                log.error("HA port %d unavailable (%s): slaves cannot follow this broker; "
                          "set haListenPort", self.config.ha_port, e)
                return
            self.ha_master = ha
            log.info("HA port %d (%s)", ha.port, self.config.brokerRole.value)

    async def _ha_master_addr(self) -> str | None:
        """haMasterAddress, else what the name server says (asked again while unknown)."""
        if self.config.haMasterAddress:
            return self.config.haMasterAddress
        if not self._learned_ha_master:
            await self.register_now()
        return self._learned_ha_master or None

    async def _stop_ha(self) -> None:
        for d in (self.ha_master, self.ha_slave):
            if d is not None:
                await d.stop()
        self.ha_master = self.ha_slave = None

    # ---- name server ----------------------------------------------------------------
    def _namesrvs(self) -> list[str]:
        return [a.strip() for a in self.config.namesrvAddr.split(";") if a.strip()]

    async def _sync_from_master_loop(self) -> None:
        """Followers copy the master's topic configs and consumer offsets (RocketMQ's
        SlaveSynchronize), so a new leader knows the topics and the groups' progress."""
        while True:
            await asyncio.sleep(self.config.slaveSyncInterval / 1000)
            if not self.is_slave:
                continue
            try:
                await self.sync_from_master()
            except (RemotingError, ValueError, KeyError) as e:
                log.debug("sync from master failed: %s", e)

    async def sync_from_master(self) -> None:
        master = None
        for ns in self._namesrvs():
            r = await self.namesrv_client.invoke(ns, RemotingCommand(
                RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
            if r.code == ResponseCode.SUCCESS:
                bd = json.loads(r.body)["brokerAddrTable"].get(self.config.brokerName, {})
                master = bd.get("brokerAddrs", {}).get("0")
                break
        if not master or master == self.address:
            return
        r = await self.namesrv_client.invoke(master, RemotingCommand(
            RequestCode.GET_ALL_TOPIC_CONFIG), 3.0)
        if r.code == ResponseCode.SUCCESS:
            for name, tc in json.loads(r.body)["topicConfigTable"].items():
                theirs = TopicConfig(**{k: v for k, v in tc.items()
                                        if k in TopicConfig.__dataclass_fields__})
                if self.topics.get(name) != theirs:
                    self.topics.put(theirs)
        r = await self.namesrv_client.invoke(master, RemotingCommand(
            RequestCode.GET_ALL_CONSUMER_OFFSET), 3.0)
        if r.code == ResponseCode.SUCCESS:
            for key, queues in json.loads(r.body)["offsetTable"].items():
                topic, group = key.split("@", 1)
                for qid, off in queues.items():
                    if int(off) > (self.offsets.query(topic, group, int(qid)) or -1):
                        self.offsets.commit(topic, group, int(qid), int(off))

    @property
    def is_writable_master(self) -> bool:
        """Takes writes now: the only broker of the group whose own services (delayed
        delivery) may append; a slave's log must stay a copy of its master's."""
        if self.dledger is not None:
            return self.dledger.is_leader
        if self.checkpoint is not None:
            return self.checkpoint.is_master
        if self.replicas is not None:
            return self.replicas.is_master and self.ha_master is not None
        return self.config.brokerRole is not BrokerRole.SLAVE

    @property
    def is_slave(self) -> bool:
        """Copies another broker's log (a DLedger follower, a classic or checkpoint slave)."""
        if self.dledger is not None:
            return not self.dledger.is_leader
        if self.replicas is not None:
            return not self.replicas.is_master
        return self.ha_slave is not None

    @property
    def broker_id(self) -> int | None:
        """In DLedger mode the leader is the master (0), followers are slaves. In
        checkpoint mode the master is 0 and a slave its control-node slot (None: waiting)."""
        if self.checkpoint is not None:
            if self.checkpoint.is_master:
                return 0
            return self.checkpoint.slot if self.ha_slave is not None else None
        if self.replicas is not None:  # the master is 0, a slave its controller-given id
            r = self.replicas
            return 0 if r.is_master else r.broker_id if r.role == "SLAVE" else None
        if self.dledger is None:
            return self.config.brokerId
        if self.dledger.is_leader:
            return 0
        return 1 + sorted(self.dledger.peers).index(self.config.dLegerSelfId)

    def _on_role_change(self, role) -> None:
        if self.is_writable_master:  # a new DLedger leader serves every topic it holds
            self.adopt_stored_topics()
        asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        await self._unregister_from_namesrv()
        await self.register_now()

    def _register_request(self) -> RemotingCommand:
        body = {"topicConfigSerializeWrapper": self.topics.to_json(), "filterServerList": []}
        return RemotingCommand(RequestCode.REGISTER_BROKER, ext={
            "brokerAddr": self.address, "brokerName": self.config.brokerName,
            "clusterName": self.config.brokerClusterName, "brokerId": str(self.broker_id),
            "haServerAddr": f"{self.config.brokerIP1}:{self.ha_port}",
            "compressed": "false"}, body=json_body(body))

    async def register_now(self) -> None:
        if self.broker_id is None:
            return  # no role yet: clients should not see this broker
        for addr in self._namesrvs():
            try:
                r = await self.namesrv_client.invoke(addr, self._register_request(), 3.0)
                if r.code != ResponseCode.SUCCESS:
                    log.warning("name server %s refused registration: %s", addr, r.remark)
                elif r.ext.get("haServerAddr"):
                    self._learned_ha_master = r.ext["haServerAddr"]
            except RemotingError as e:
                log.warning("cannot register with name server %s: %s", addr, e)

    async def _register_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.registerNameServerPeriod / 1000)
            await self.register_now()

    async def _unregister_from_namesrv(self) -> None:
        for addr in self._namesrvs():
            try:
                await self.namesrv_client.invoke(addr, RemotingCommand(
                    RequestCode.UNREGISTER_BROKER, ext={
                        "brokerAddr": self.address, "brokerName": self.config.brokerName,
                        "clusterName": self.config.brokerClusterName,
                        "brokerId": str(self.broker_id)}), 1.0)
            except RemotingError:
                pass

    # ---- dispatch -------------------------------------------------------------------
    def handle(self, cmd: RemotingCommand, conn: Connection):
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f"request code {cmd.code} is not supported by this broker")
        if not conn.attrs.get("watched"):
            conn.attrs["watched"] = True
            conn.closed.add_done_callback(lambda _: self.consumers.connection_closed(conn))
        try:
            result = handler(cmd, conn)
        except (BadRequest, KeyError, ValueError) as e:
            return self._bad_request(cmd, e)
        if asyncio.iscoroutine(result):
            return self._guard(cmd, result)
        return result

    async def _guard(self, cmd: RemotingCommand, coro) -> RemotingCommand:
        try:
            return await coro
        except (BadRequest, KeyError, ValueError) as e:
            return self._bad_request(cmd, e)

    @staticmethod
    def _bad_request(cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad request (code {cmd.code}): {what}")

    # ---- topics ---------------------------------------------------------------------
    def _create_topic(self, tc: TopicConfig) -> TopicConfig:
        self.topics.put(tc)
        asyncio.get_running_loop().create_task(self.register_now())
        log.info("topic %s created: %d write / %d read queues", tc.topicName,
                 tc.writeQueueNums, tc.readQueueNums)
        return tc

    def _topic_for_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        tc = self.topics.get(topic)
        if tc is not None:
            return tc
        if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
            return self._create_topic(TopicConfig(topic, 1, 1))
        template = self.topics.get(default_topic or AUTO_CREATE_TOPIC)
        if not self.config.autoCreateTopicEnable or template is None:
            return None
        n = max(1, min(queue_nums or template.writeQueueNums, template.writeQueueNums))
        return self._create_topic(TopicConfig(topic, n, n))

    def adopt_stored_topics(self) -> None:
        """A slave that becomes master serves every topic its log holds, config or not."""
        for topic in self.store.topics():
            if self.topics.get(topic) is None:
                self._replicated_topic(topic, True)

    def _replicated_topic(self, topic: str, force: bool = False) -> TopicConfig | None:
        """A slave may hold a topic's messages before it has copied the topic's config
        from the master: its queues are proof enough to serve reads."""
        qids = self.store.queue_ids(topic) if self.is_slave or force else []
        if not qids:
            return None
        n = max(qids) + 1
        tc = TopicConfig(topic, n, n)
        self.topics.put(tc)
        return tc

    def _retry_topic(self, group: str) -> TopicConfig:
        name = RETRY_PREFIX + group
        return self.topics.get(name) or self._create_topic(TopicConfig(name, 1, 1))

    # ---- send -----------------------------------------------------------------------
    def _send(self, cmd: RemotingCommand, conn: Connection):
        """A send request: answered at once when nothing needs waiting for (ASYNC_FLUSH),
        else through a coroutine that waits for durability."""
        if self.checkpoint is not None:
            if not self.checkpoint.is_master:
                return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                    f"broker {self.address} is not the master of "
                                    f"{self.config.brokerName} now "
                                    f"({self.checkpoint.replica.role}): not writable")
        elif self.replicas is not None:
            if not self.replicas.is_master or self.ha_master is None:
                return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                    f"broker {self.address} is not the master of "
                                    f"{self.config.brokerName} now ({self.replicas.role}): "
                                    "not writable")
        elif self.config.brokerRole is BrokerRole.SLAVE:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"broker {self.config.brokerName} is a slave: not writable")
        h = parse_send_header(cmd.ext)
        try:
            check_topic(h.topic)
        except MessageFormatError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        tc = self._topic_for_send(h.topic, h.default_topic, h.default_topic_queue_nums)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"topic[{h.topic}] not exist, apply first please!")
        if not tc.perm & PERM_WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"the topic[{h.topic}] sending is forbidden")
        qid = h.queue_id if h.queue_id >= 0 else random.randrange(tc.writeQueueNums)
        if qid >= tc.writeQueueNums:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"request queueId[{qid}] is illegal, topic {h.topic} has "
                                f"{tc.writeQueueNums} write queues")
        topic = h.topic
        try:
            if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
                batch = split_batch_body(cmd.body, props_from_header(h.properties))
            else:
                props = props_from_header(h.properties)
                batch = BatchBody([cmd.body], [props], [h.flag], [tags_of(props)],
                                  [index_keys(props)])
        except MessageFormatError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        if batch.props and wants_dedup(batch.props[0]) and self.store.index is not None:
            # an idempotent (retried) send: what is stored already is not stored twice
            drop_stored(batch, lambda key: bool(self.store.query_by_key(topic, key, 1)),
                        lambda keys: self.store.index.maybe_present(topic, keys))
            if not batch.bodies:
                return cmd.response(ResponseCode.SUCCESS, "every message was stored before",
                                    {"msgId": "", "queueId": str(qid), "queueOffset": "-1"})
        if topic.startswith(RETRY_PREFIX):
            max_times = h.max_reconsume_times if h.max_reconsume_times is not None \
                else self.config.maxReconsumeTimes
            if h.reconsume_times >= max_times:
                topic, qid = self._dlq(topic[len(RETRY_PREFIX):])
        level = delay_level_of(bytes(batch.props[0])) if len(batch.bodies) == 1 else 0
        if level > 0:
            batch.props = [to_schedule(bytes(batch.props[0]), topic, qid)]
            topic, qid = SCHEDULE_TOPIC, min(level, len(self.config.delay_levels_ms)) - 1
        return self._put(cmd, conn, topic, qid, batch, h.sys_flag, h.born_timestamp,
                         h.reconsume_times)

    def _dlq(self, group: str) -> tuple[str, int]:
        name = DLQ_PREFIX + group
        if self.topics.get(name) is None:
            self._create_topic(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))
        return name, 0

    def _put(self, cmd, conn, topic, qid, batch: BatchBody, sys_flag, born_ts,
             reconsume_times):
        """Append; returns the response, or a coroutine of it when a flush must be awaited."""
        born_host = conn.attrs.get("born_host")
        if born_host is None:
            try:
                host, port = conn.peer.rsplit(":", 1)
                born_host = pack_host(host, int(port))
            except (OSError, ValueError):
                born_host = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
            conn.attrs["born_host"] = born_host
        try:
            encoded = self.store.encode(
                topic, qid, batch.bodies, batch.props, batch.tags, flag=batch.flags,
                sys_flag=sys_flag, born_timestamp=born_ts, born_host=born_host,
                reconsume_times=reconsume_times, index_keys=batch.index_keys)
        except MessageFormatError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        if self.dledger is not None:
            return self._put_replicated(cmd, qid, encoded)
        result = self.store.append(encoded)
        wait = self.store.durable_wait(result)
        if self.ha_master is not None and result.ok:
            self.ha_master.appended()
            if self.checkpoint is not None:
                return self._after_checkpoint(cmd, qid, result, wait,
                                              self.ha_master.sync(result.end_offset))
            if self.config.brokerRole is BrokerRole.SYNC_MASTER or self.replicas is not None:
                return self._after_slave(cmd, qid, result, wait,
                                         self.ha_master.sync(result.end_offset))
        if wait is None:
            return self._send_response(cmd, qid, result)
        return self._after_flush(cmd, qid, result, wait)

    def _append_replicated(self, encoded):
        """The leader's write in DLedger mode: append locally, then the batch's bytes become
        one Raft entry. Returns (result, future of the entry's Complete or None)."""
        start = self.store.commitlog.max_offset
        result = self.store.append(encoded)
        if not result.ok:
            return result, None
        return result, self.dledger.propose_range(start, result.end_offset)

    def _append_for_schedule(self, encoded):
        """Delayed delivery writes through Raft in DLedger mode (fire and forget: a batch
        lost with a leadership change is delivered again by the next leader)."""
        if self.dledger is None:
            return self.store.append(encoded)
        result, fut = self._append_replicated(encoded)
        if fut is not None and fut.done() and fut.result().code is not Code.SUCCESS:
            result.status = PutStatus.SERVICE_NOT_AVAILABLE
        return result

    def _put_replicated(self, cmd, qid, encoded):
        """DLedger mode: SEND_OK only once a quorum holds the batch."""
        d = self.dledger
        if not d.is_leader:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"{d.self_id} is not the DLedger leader (leader: {d.node.leader})")
        result, fut = self._append_replicated(encoded)
        if fut is None:
            return self._send_response(cmd, qid, result)
        return self._after_quorum(cmd, qid, result, fut)

    def _after_quorum(self, cmd, qid, result, fut: asyncio.Future) -> ReplyWhen:
        return ReplyWhen(fut, lambda done: self._quorum_response(cmd, qid, result, done))

    def _quorum_response(self, cmd, qid, result, done) -> RemotingCommand:
        if done.code is Code.SUCCESS:
            return self._send_response(cmd, qid, result)
        if done.code is Code.WAIT_QUORUM_ACK_TIMEOUT:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.error = "no quorum acknowledged the batch in time"
            return self._send_response(cmd, qid, result)
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                            f"{done.code.value}: leadership changed before the batch committed")

    def _after_slave(self, cmd, qid, result, wait, synced):
        """SYNC_MASTER (S2): SEND_OK once a slave acknowledged the batch's end; controller
        mode (S1): once the SyncStateSet did, as inSyncReplicas/allAckInSyncStateSet say."""
        if wait is None:
            return ReplyWhen(synced, lambda st: self._slave_response(cmd, qid, result, st))
        return self._after_flush_and_slave(cmd, qid, result, wait, synced)

    async def _after_flush_and_slave(self, cmd, qid, result, wait, synced) -> RemotingCommand:
        if not await wait:
            self.store.mark_flush_timeout(result)
        return self._slave_response(cmd, qid, result, await synced)

    def _slave_response(self, cmd, qid, result, status) -> RemotingCommand:
        if result.status is PutStatus.PUT_OK and status is not SyncStatus.OK:
            if status is SyncStatus.SLAVE_NOT_AVAILABLE:
                result.status = PutStatus.SLAVE_NOT_AVAILABLE
                result.error = "no slave is connected, or it is too far behind"
            elif status is SyncStatus.NOT_ENOUGH_REPLICAS:
                result.status = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
                result.error = (f"stored on the master but not acknowledged: the SyncStateSet "
                                f"has fewer than minInSyncReplicas="
                                f"{self.config.minInSyncReplicas} members")
            else:
                result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
                result.error = (f"no slave acknowledged within syncFlushTimeout="
                                f"{self.store.config.syncFlushTimeout} ms")
        return self._send_response(cmd, qid, result)

    async def _after_checkpoint(self, cmd, qid, result, wait, synced) -> RemotingCommand:
        """Checkpoint mode (S3-3): SEND_OK once the consistent checkpoint covers the batch,
        or once the control node holds it; otherwise SEND_PENDING for the producer to
        resolve (Producer.resolve)."""
        if wait is not None and not await wait:
            self.store.mark_flush_timeout(result)
        if await synced is SyncStatus.OK:
            return self._send_response(cmd, qid, result)
        start = int(result.phys_offsets[0])
        epoch = self.checkpoint.master_epoch
        msg_id = f"{epoch}-{start}"
        try:
            data = b"".join(bytes(self.store.commitlog.read(int(o), self.store.commitlog.size_at(
                int(o)))) for o in result.phys_offsets)
        except StoreError:  # rolled back meanwhile: it is not ours to keep
            data = b""
        if data and await self.checkpoint.cache(start, result.end_offset, msg_id, data):
            return self._send_response(cmd, qid, result)
        why = "not yet covered by the consistent checkpoint and not cached by the control node"
        if cmd.language != PENDING_AWARE_LANGUAGE:
            # RocketMQ's own clients know no PENDING (an unknown code is an error to them).
            # FLUSH_SLAVE_TIMEOUT is their status for "stored on the master, not confirmed
            # by a slave", which is what PENDING means; Java's does not resend it by
            # default, the C++ client resends any non-SEND_OK, as against RocketMQ itself.
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.error = f"pending {msg_id}: {why}; a failover may roll it back"
            return self._send_response(cmd, qid, result)
        resp = self._send_response(cmd, qid, result)
        resp.code = ResponseCode.SEND_PENDING
        resp.remark = f"{why}: resolve before resending"
        resp.ext.update(pendingEpoch=str(epoch), pendingEnd=str(result.end_offset),
                        pendingId=msg_id, controlNodeAddr=self.config.controlNodeAddr,
                        brokerName=self.config.brokerName)
        return resp

    async def _promote(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if self.checkpoint is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "this broker is not in checkpoint mode")
        return await self.checkpoint.promote(cmd)

    def _epoch_cache(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if self.replicas is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "this broker is not in controller mode")
        r = self.replicas
        return cmd.response(ResponseCode.SUCCESS, body=json_body({
            "brokerName": self.config.brokerName, "brokerId": r.broker_id, "role": r.role,
            "masterEpoch": r.master_epoch, "maxOffset": self.store.commitlog.max_offset,
            "confirmOffset": self.store.dispatch_bound,
            "epochs": [{"epoch": e, "startOffset": s} for e, s in r.epochs.entries]}))

    def _after_flush(self, cmd, qid, result, wait) -> ReplyWhen:
        def respond(flushed: bool) -> RemotingCommand:
            if not flushed:
                self.store.mark_flush_timeout(result)
            return self._send_response(cmd, qid, result)
        return ReplyWhen(wait, respond)

    def _send_response(self, cmd: RemotingCommand, qid: int, result) -> RemotingCommand:
        code = _SEND_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
        if result.status not in _STORED:
            return cmd.response(code, f"{result.status.value}: {result.error}")
        ext = {"msgId": ",".join(result.msg_ids(self.store_host)), "queueId": str(qid),
               "queueOffset": str(result.queue_offset), "MSG_REGION": "DefaultRegion",
               "TRACE_ON": "true"}
        return cmd.response(code, None if code == ResponseCode.SUCCESS else result.error, ext)

    async def _send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        group = ext["group"]
        try:
            msg = self.store.message_at(int(ext["offset"]))
        except (StoreError, MessageFormatError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed: {e}")
        max_times = int(ext.get("maxReconsumeTimes") or self.config.maxReconsumeTimes)
        delay = int(ext.get("delayLevel") or 0)
        reconsume = msg.reconsume_times + 1
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, ext.get("originMsgId") or msg.msg_id)
        if msg.reconsume_times >= max_times or delay < 0:
            topic, qid = self._dlq(group)
            props.pop("DELAY", None)
        else:
            tc = self._retry_topic(group)
            topic, qid = tc.topicName, random.randrange(tc.writeQueueNums)
            props["DELAY"] = str(delay if delay > 0 else 3 + msg.reconsume_times)
        raw = with_properties(b"", props)
        if topic.startswith(RETRY_PREFIX):
            raw = to_schedule(raw, topic, qid)
            level = int(props["DELAY"])
            topic, qid = SCHEDULE_TOPIC, min(level, len(self.config.delay_levels_ms)) - 1
        r = self._put(cmd, conn, topic, qid,
                      BatchBody([msg.body], [raw], [msg.flag], [tags_of(raw)], [index_keys(raw)]),
                      msg.sys_flag, msg.born_timestamp, reconsume)
        if isinstance(r, ReplyWhen):  # waits for a flush, a slave or a quorum
            r = r.respond(await r.future)
        elif asyncio.iscoroutine(r):
            r = await r
        return cmd.response(r.code, r.remark)

    # ---- pull -----------------------------------------------------------------------
    async def _pull(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        group, topic = ext["consumerGroup"], ext["topic"]
        qid, offset = int(ext["queueId"]), int(ext["queueOffset"])
        max_nums = max(1, min(int(ext.get("maxMsgNums", 32)), self.config.pullBatchMaxMessages))
        sys_flag = int(ext.get("sysFlag", 0))
        tc = self.topics.get(topic) or self._replicated_topic(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & PERM_READ:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling is forbidden")
        if not 0 <= qid < max(tc.readQueueNums, tc.writeQueueNums):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"queueId[{qid}] is illegal, topic {topic} has {tc.readQueueNums} "
                                f"read queues")
        if ext.get("expressionType", "TAG") not in ("TAG", ""):
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"expression type {ext['expressionType']} is not supported; use TAG")
        try:
            if sys_flag & PULL_FLAG_SUBSCRIPTION or "subscription" in ext:
                codes = parse_subscription(ext.get("subscription"))
            else:
                sub = self.consumers.groups.get(group)
                sub = sub.subscriptions.get(topic) if sub else None
                codes = parse_subscription(sub.get("subString")) if sub else None
        except ValueError as e:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
        commit = int(ext.get("commitOffset", -1) or -1)
        if sys_flag & PULL_FLAG_COMMIT_OFFSET and commit >= 0 and self.is_writable_master:
            self.offsets.commit(topic, group, qid, commit)
        suspend_ms = int(ext.get("suspendTimeoutMillis", 0) or 0)
        deadline = time.monotonic() + suspend_ms / 1000
        while True:
            got = self.store.get_messages(topic, qid, offset, max_nums,
                                          self.config.pullBatchMaxBytes, codes)
            code = self._pull_code(got.status, offset)
            if (code != ResponseCode.PULL_NOT_FOUND or not sys_flag & PULL_FLAG_SUSPEND
                    or not self.config.longPollingEnable):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await self.holds.wait(topic, qid, offset, left)
            if time.monotonic() >= deadline and self.store.max_offset_in_queue(topic, qid) <= offset:
                break
        resp_ext = {"nextBeginOffset": str(got.next_begin_offset),
                    "minOffset": str(got.min_offset), "maxOffset": str(got.max_offset),
                    "suggestWhichBrokerId": "0"}
        if code == ResponseCode.SUCCESS:
            return cmd.response(code, None, resp_ext, list(got.buffers))
        return cmd.response(code, got.status.value, resp_ext)

    @staticmethod
    def _pull_code(status: GetStatus, offset: int) -> ResponseCode:
        if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        return _PULL_CODES[status]

    # ---- consumer offsets and clients ---------------------------------------------
    def _query_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
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

    def _update_consumer_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        self.offsets.commit(ext["topic"], ext["consumerGroup"], int(ext["queueId"]),
                            int(ext["commitOffset"]))
        return cmd.response(ResponseCode.SUCCESS)

    def _heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = json.loads(cmd.body or b"{}")
        client_id = data.get("clientID", conn.peer)
        conn.attrs["client_id"] = client_id
        for consumer in data.get("consumerDataSet", []):
            self.consumers.register(conn, client_id, consumer)
            if consumer.get("messageModel", "CLUSTERING") == "CLUSTERING":
                self._retry_topic(consumer["groupName"])
        for producer in data.get("producerDataSet", []):
            conn.attrs.setdefault("producer_groups", set()).add(producer.get("groupName"))
        return cmd.response(ResponseCode.SUCCESS)

    def _unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = cmd.ext.get("consumerGroup")
        if group:
            self.consumers.unregister(conn, group)
        return cmd.response(ResponseCode.SUCCESS)

    def _consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = self.consumers.groups.get(cmd.ext["consumerGroup"])
        if group is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"no consumer for this group, {cmd.ext['consumerGroup']}")
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json_body({"consumerIdList": group.client_ids()}))

    def _consumer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
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

    def _lock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = json.loads(cmd.body)
        ok = self.consumers.lock(req["consumerGroup"], req["clientId"], req.get("mqSet", []))
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"lockOKMQSet": ok}))

    def _unlock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = json.loads(cmd.body)
        self.consumers.unlock(req["consumerGroup"], req["clientId"], req.get("mqSet", []))
        return cmd.response(ResponseCode.SUCCESS)

    # ---- queries --------------------------------------------------------------------
    def _max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        off = self.store.max_offset_in_queue(cmd.ext["topic"], int(cmd.ext["queueId"]))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def _min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        off = self.store.min_offset_in_queue(cmd.ext["topic"], int(cmd.ext["queueId"]))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def _offset_by_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        off = self.store.offset_by_time(cmd.ext["topic"], int(cmd.ext["queueId"]),
                                        int(cmd.ext["timestamp"]))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def _earliest_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic, qid = cmd.ext["topic"], int(cmd.ext["queueId"])
        got = self.store.get_messages(topic, qid, self.store.min_offset_in_queue(topic, qid), 1)
        ts = decode_message(got.messages()[0]).store_timestamp if got.message_count else -1
        return cmd.response(ResponseCode.SUCCESS, None, {"timestamp": str(ts)})

    def _view_by_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        phys = int(cmd.ext["offset"])
        try:
            size = self.store.commitlog.size_at(phys)
            data = bytes(self.store.commitlog.read(phys, size))
            decode_message(data)
        except (StoreError, MessageFormatError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"can not find message by the offset, {phys}: {e}")
        return cmd.response(ResponseCode.SUCCESS, None, None, data)

    def _query_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        try:
            msgs = self.store.query_by_key(ext["topic"], ext["key"], int(ext.get("maxNum", 32)),
                                           int(ext.get("beginTimestamp", 0)),
                                           int(ext.get("endTimestamp", 1 << 62)))
        except StoreError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if not msgs:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                "can not find message, maybe time range not correct")
        body = [self.store.commitlog.read(m.phys_offset, m.total_size) for m in msgs]
        return cmd.response(ResponseCode.SUCCESS, None, {
            "indexLastUpdateTimestamp": str(int(time.time() * 1000)),
            "indexLastUpdatePhyoffset": str(self.store.commitlog.max_offset)}, body)

    # ---- admin ----------------------------------------------------------------------
    def _update_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
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
        self._create_topic(TopicConfig(topic, read, write, int(ext.get("perm", 6)),
                                       ext.get("topicFilterType", "SINGLE_TAG"),
                                       int(ext.get("topicSysFlag", 0)),
                                       str(ext.get("order", "false")).lower() == "true"))
        return cmd.response(ResponseCode.SUCCESS)

    def _delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.topics.delete(cmd.ext["topic"])
        asyncio.get_running_loop().create_task(self.register_now())
        return cmd.response(ResponseCode.SUCCESS)

    def _all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(self.topics.to_json()))

    def runtime_info(self) -> dict[str, str]:
        info = {k: str(v) for k, v in self.store.runtime_info().items()}
        info.update({"brokerName": self.config.brokerName,
                     "brokerRole": self.config.brokerRole.value,
                     "brokerAddr": self.address, "bootTimestamp": str(int(self.started_at * 1000)),
                     "topicCount": str(len(self.topics.topics)),
                     "consumerGroups": str(len(self.consumers.groups)),
                     "heldPulls": str(self.holds.held if self.holds else 0),
                     "connections": str(len(self.server.connections))})
        if self.ha_master is not None:
            info["ha"] = json.dumps(self.ha_master.status())
        if self.ha_slave is not None:
            info["ha"] = json.dumps(self.ha_slave.status())
        if self.checkpoint is not None:
            st = self.checkpoint.status()
            info["brokerRole"] = st["role"]
            info["checkpoint"] = json.dumps(st)
        if self.replicas is not None:
            st = self.replicas.status()
            info["brokerRole"] = st["role"]
            info["brokerId"] = str(self.broker_id)
            info["controller"] = json.dumps(st)
        if self.dledger is not None:
            info["brokerRole"] = "LEADER" if self.dledger.is_leader else "FOLLOWER"
            info["brokerId"] = str(self.broker_id)
            info["dledger"] = json.dumps(self.dledger.status())
        return info

    def _runtime_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"table": self.runtime_info()}))

    def _consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = cmd.ext["consumerGroup"]
        topic = cmd.ext.get("topic")
        topics = [topic] if topic else self.offsets.topics_of(group)
        rows = []
        for t in topics:
            tc = self.topics.get(t)
            for qid in range(tc.writeQueueNums if tc else 0):
                committed = self.offsets.query(t, group, qid)
                rows.append({"topic": t, "brokerName": self.config.brokerName, "queueId": qid,
                             "brokerOffset": self.store.max_offset_in_queue(t, qid),
                             "consumerOffset": -1 if committed is None else committed})
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json_body({"offsetTable": rows, "consumeTps": 0}))

    def _topic_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = cmd.ext["topic"]
        tc = self.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        rows = [{"topic": topic, "brokerName": self.config.brokerName, "queueId": q,
                 "minOffset": self.store.min_offset_in_queue(topic, q),
                 "maxOffset": self.store.max_offset_in_queue(topic, q)}
                for q in range(tc.writeQueueNums)]
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"offsetTable": rows}))

    def _all_consumer_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body({"offsetTable": {
            k: {str(q): o for q, o in v.items()} for k, v in self.offsets.table.items()}}))

    def _all_delay_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, None, json_body(
            {"offsetTable": {str(k): v for k, v in self.schedule.offsets.items()}}))

