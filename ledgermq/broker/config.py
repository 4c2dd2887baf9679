"""Broker settings (broker.conf keys, as RocketMQ names them) and loading them."""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..drivers.control_node import control_node_addrs
from ..peer_auth.core import load_secret
from ..remoting.tls import DISABLED, Tls, needs_tls_links, split_tls
from ..runtime.config import (
    ConfigError, build, check, explain_unknown, non_negative, positive, read_properties,
)
from ..store.config import StoreConfig

log = logging.getLogger(__name__)


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def _port(v: int) -> str | None:
    return None if 0 <= v < 65536 else "must be a TCP port (0-65535)"


def _delay_levels(v: str) -> str | None:
    try:
        parse_delay_levels(v)
    except ValueError as e:
        return str(e)
    return None


_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """'1s 5s 10s 30s 1m ...' -> delays in ms, level 1 first."""
    out = []
    for item in text.split():
        unit = item[-1:]
        if unit not in _UNITS or not item[:-1].replace(".", "", 1).isdigit():
            raise ValueError(f"delay level {item!r} is not a number followed by s, m, h or d")
        out.append(int(float(item[:-1]) * _UNITS[unit]))
    if not out:
        raise ValueError("no delay levels")
    return out


@dataclass
class BrokerConfig:
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = field(default=0, metadata=check(non_negative))
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    namesrvAddr: str = ""
    brokerIP1: str = "127.0.0.1"  # the address advertised to the name server and clients
    listenPort: int = field(default=10911, metadata=check(_port))
    bindAddress: str = "127.0.0.1"
    autoCreateTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    # the topics named after the cluster and after the broker (RocketMQ's): their routes name
    # the brokers, which createTopic(clusterName, ...) and sends to one broker go by
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    defaultTopicQueueNums: int = field(default=8, metadata=check(positive))
    longPollingEnable: bool = True
    shortPollingTimeMills: int = field(default=1000, metadata=check(positive))
    registerNameServerPeriod: int = field(default=30_000, metadata=check(positive))
    # a slave (or a master whose queues wait for replication) corrects a consumer's offset
    # past its queue instead of answering "retry" (RocketMQ's key and default)
    offsetCheckInSlave: bool = False
    # how far a RocketMQ 5 client's signed x-mq-date-time may lie from the broker's clock
    aclSignatureWindowSeconds: int = field(default=900, metadata=check(positive))
    messageDelayLevel: str = field(default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m "
                                           "30m 1h 2h", metadata=check(_delay_levels))
    maxReconsumeTimes: int = field(default=16, metadata=check(non_negative))
    # transactions: a half message undecided this long (ms) is checked back with its
    # producer group, every transactionCheckInterval ms, at most transactionCheckMax times
    # Prometheus metrics over HTTP on this port (0: off); RocketMQ 5's
    # metricsPromExporterPort is read when metricsPort is not given
    metricsPort: int = field(default=0, metadata=check(_port))
    metricsPromExporterPort: int = field(default=0, metadata=check(_port))
    # RocketMQ's ACL 1.0: every client request signed, checked against aclFile's accounts
    # (plain_acl.yml; default <storePathRootDir>/config/plain_acl.yml), read again on change
    aclEnable: bool = False
    aclFile: str = ""
    # this broker's own account, signing what it asks other servers (a master, name servers)
    accessKey: str = ""
    secretKey: str = ""
    # the secret all servers of the cluster share (ledgermq/peer_auth/core.py): the HA port,
    # DLedger peers, the controller and control-node protocols admit only peers that prove
    # they know it. Inline, or (better: out of broker.conf) a file holding it. "": off
    clusterSecret: str = field(default="", repr=False)
    clusterSecretFile: str = ""
    # RocketMQ 5 clients (gRPC MessagingService) on this port: -1 off, 0 any free port
    grpcServerPort: int = field(default=-1, metadata=check(
        lambda v: None if -1 <= v < 65536 else "must be -1 (off) or a TCP port (0-65535)"))
    # RocketMQ's proxy key: under tls.server.mode=disabled the gRPC port takes TLS as well,
    # with a self-signed certificate (RocketMQ 5's clients default to TLS); false: plaintext
    tlsTestModeEnable: bool = True
    # the furthest delivery time a gRPC message may ask for (RocketMQ's proxy key: a day)
    maxDelayTimeMills: int = field(default=24 * 3600 * 1000, metadata=check(positive))
    # the shortest invisible duration a gRPC receive may ask for (the proxy's key: 10 s)
    minInvisibleTimeMillsForRecv: int = field(default=10_000, metadata=check(positive))
    # SQL92 subscriptions (MessageSelector.bySql), evaluated on the broker
    enablePropertyFilter: bool = False
    transactionTimeOut: int = field(default=6000, metadata=check(positive))
    transactionCheckInterval: int = field(default=60_000, metadata=check(positive))
    transactionCheckMax: int = field(default=15, metadata=check(positive))
    # timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): the longest delay
    timerMaxDelaySec: int = field(default=3 * 24 * 3600, metadata=check(positive))
    flushConsumerOffsetInterval: int = field(default=5000, metadata=check(positive))
    maxFrameSize: int = field(default=16 << 20, metadata=check(positive))
    clientChannelMaxIdleTimeSeconds: float = field(default=120.0, metadata=check(positive))
    # per-client bounds (#31): requests one remoting connection may have in flight (past
    # it: SYSTEM_BUSY), the longest a pull may be held (a longer suspendTimeoutMillis is
    # cut to it), the longest a gRPC receive may poll, and the gRPC streams (calls) one
    # connection may have open at once
    maxInFlightRequestsPerConnection: int = field(default=16384, metadata=check(positive))
    # topics and subscription groups clients may create (auto-creation) in a minute
    maxTopicsCreatedPerMinute: int = field(default=1000, metadata=check(positive))
    maxGroupsCreatedPerMinute: int = field(default=1000, metadata=check(positive))
    pullSuspendMaxMillis: int = field(default=30_000, metadata=check(positive))
    grpcClientConsumerMaxLongPollingTimeoutMillis: int = field(default=20_000,
                                                               metadata=check(positive))
    grpcMaxConcurrentStreamsPerConnection: int = field(default=1024, metadata=check(positive))
    pullBatchMaxMessages: int = field(default=4096, metadata=check(positive))
    pullBatchMaxBytes: int = field(default=8 << 20, metadata=check(positive))
    # classic HA (S2): the master's HA port and the slave's view of it
    haListenPort: int = field(default=-1, metadata=check(lambda v: None if -1 <= v < 65536
                                                           else "must be a TCP port or -1"))
    haMasterAddress: str = ""  # host:port of the master's HA port (else from the name server)
    haSendHeartbeatInterval: int = field(default=5000, metadata=check(positive))  # ms
    haHousekeepingInterval: int = field(default=20_000, metadata=check(positive))  # ms
    haSlaveFallbehindMax: int = field(default=256 << 20, metadata=check(positive))  # bytes
    haTransferBatchSize: int = field(default=256 << 10, metadata=check(positive))  # bytes
    # ledgermq's: a master that had slaves takes no write after a restart that may have lost
    # bytes for this long (ms), refilling from every slave holding more than it does (what a
    # power cut or a damaged segment took from its log), and a SYNC_MASTER until a slave
    # reported too; 0: off, as in RocketMQ
    haMasterRecoveryWaitMillis: int = field(default=2000, metadata=check(non_negative))
    # consistent checkpoint + control node (S3)
    enableConsistentCheckpoint: bool = False
    controlNodeAddr: str = ""
    controlNodeHeartbeatInterval: int = field(default=200, metadata=check(positive))  # ms
    # a member slave silent this long (or back without its copy) stops counting in the
    # checkpoint, once the control node saved that
    checkpointMemberTimeout: int = field(default=30_000, metadata=check(positive))  # ms
    # a send waits this long (ms) for the checkpoint to cover it before the master hands it
    # to the control node (S3-3): with the control node's answer, the reply stays within
    # RocketMQ clients' 3 s send timeout (syncFlushTimeout, 5 s, would not)
    checkpointSyncTimeoutMillis: int = field(default=1000, metadata=check(positive))
    # a send neither covered nor cached, from a client that knows no PENDING (RocketMQ's
    # own), is resolved with the control node until this long (ms) after it was written
    # (S3-4 done by the broker): SEND_OK on DONE, SERVICE_NOT_AVAILABLE on RESEND
    checkpointResolveWithinMillis: int = field(default=2500, metadata=check(positive))
    # controller mode (S1): RocketMQ 5's keys
    enableControllerMode: bool = False
    controllerAddr: str = ""  # host:port;host:port of the controllers (or name servers)
    brokerHeartbeatInterval: int = field(default=1000, metadata=check(positive))  # ms
    haMaxTimeSlaveNotCatchUp: int = field(default=15_000, metadata=check(positive))  # ms
    # ledgermq's default differs from RocketMQ's (false): a send waits for every member of
    # the SyncStateSet, so a failover to any member keeps it (inSyncReplicas counts only
    # when this is false)
    allAckInSyncStateSet: bool = True
    inSyncReplicas: int = field(default=1, metadata=check(positive))
    minInSyncReplicas: int = field(default=1, metadata=check(positive))
    asyncLearner: bool = False  # copies the log, never joins the SyncStateSet
    syncFromLastFile: bool = False  # an empty slave starts at the master's last file
    # the controller elects the member with the highest epoch, then the longest log, then
    # the lowest brokerElectionPriority (RocketMQ's key and default)
    brokerElectionPriority: int = 2**31 - 1
    # DLedger (Raft) commit log: RocketMQ's switches
    enableDLegerCommitLog: bool = False
    dLegerGroup: str = ""
    dLegerPeers: str = ""  # n0-host:port;n1-host:port;...
    dLegerSelfId: str = ""
    slaveSyncInterval: int = field(default=2000, metadata=check(positive))  # ms
    dLegerHeartBeatIntervalMs: int = field(default=100, metadata=check(positive))
    dLegerElectionTimeoutMs: int = field(default=300, metadata=check(positive))  # [t, 2t)
    dLegerMaxPendingSize: int = field(default=1000, metadata=check(positive))
    dLegerMaxPushTimeOutMs: int = field(default=1000, metadata=check(positive))
    dLegerQuorumAckTimeoutMs: int = field(default=3000, metadata=check(positive))
    preferredLeaderId: str = ""  # a dLegerSelfId: leadership moves there once it caught up
    # ledgermq's own: a leader no client has reached for clientQuietMillis hands over to a
    # follower whose clients report they cannot reach it (modes/client_handover.py)
    handOverOnClientReports: bool = True
    clientQuietMillis: int = field(default=2000, metadata=check(positive))
    # ledgermq's own: a master whose disk is full hands its group to a follower
    # (modes/disk_handover.py)
    handOverOnFullDisk: bool = True
    # TLS: RocketMQ's tls.* keys (tls.server.mode, tls.enable, ...), read by
    # load_broker_config into this; not a key of its own
    tls: ClassVar[Tls] = DISABLED

    def __post_init__(self) -> None:
        self.cluster_secret = load_secret(self.clusterSecret, self.clusterSecretFile)
        if isinstance(self.brokerRole, str):
            try:
                self.brokerRole = BrokerRole[self.brokerRole]
            except KeyError:
                raise ConfigError(f"brokerRole={self.brokerRole!r} is not one of "
                                  f"{', '.join(r.name for r in BrokerRole)}") from None

        if self.enableConsistentCheckpoint:
            if self.enableDLegerCommitLog:
                raise ConfigError("enableConsistentCheckpoint and enableDLegerCommitLog are "
                                  "two different replication designs: choose one")
            if not self.controlNodeAddr:
                raise ConfigError("enableConsistentCheckpoint=true needs controlNodeAddr "
                                  "(host:port of `ledgermq controlnode`, or each node of "
                                  "a control node group: host:port;host:port;host:port)")
            try:
                control_node_addrs(self.controlNodeAddr)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if self.enableControllerMode:
            if self.enableDLegerCommitLog or self.enableConsistentCheckpoint:
                raise ConfigError("enableControllerMode is its own replication design: it "
                                  "cannot be combined with enableDLegerCommitLog or "
                                  "enableConsistentCheckpoint")
            if not self.controllerAddr.strip(";").strip():
                raise ConfigError("enableControllerMode=true needs controllerAddr (host:port "
                                  "of each controller, separated by ';')")
        if self.enableDLegerCommitLog:
            from ..drivers.raft.codec import parse_peers
            try:
                peers = parse_peers(self.dLegerPeers)
            except ValueError as e:
                raise ConfigError(f"dLegerPeers={self.dLegerPeers!r}: {e}") from None
            problem = self.preferred_leader_problem(self.preferredLeaderId)
            if problem:
                raise ConfigError(problem)
            if self.dLegerSelfId not in peers:
                raise ConfigError(f"dLegerSelfId={self.dLegerSelfId!r} is not one of the "
                                  f"dLegerPeers ids {sorted(peers)}")

    def preferred_leader_problem(self, leader_id: str) -> str | None:
        """Why `leader_id` cannot be this DLedger group's preferred leader, or None."""
        if not leader_id:
            return None  # no preference
        if not self.enableDLegerCommitLog:
            return "preferredLeaderId applies to DLedger groups (enableDLegerCommitLog=true)"
        from ..drivers.raft.codec import parse_peers
        peers = parse_peers(self.dLegerPeers)
        if leader_id not in peers:
            return (f"preferredLeaderId={leader_id!r} is not one of the dLegerPeers ids "
                    f"{sorted(peers)}")
        return None

    @property
    def replicated_log(self) -> bool:
        """Consumers see only what replication confirmed (DLedger, controller and
        checkpoint mode)."""
        return self.enableDLegerCommitLog or self.enableControllerMode or \
            self.enableConsistentCheckpoint

    @property
    def metrics_port(self) -> int:
        """Where Prometheus metrics are served (0: not served)."""
        return self.metricsPort or self.metricsPromExporterPort

    @property
    def metrics_on(self) -> bool:
        return self.metrics_port != 0

    @property
    def ha_port(self) -> int:
        """haListenPort, by default listenPort + 1 (as RocketMQ); 0 when listenPort is 0."""
        if self.haListenPort >= 0:
            return self.haListenPort
        return self.listenPort + 1 if self.listenPort else 0

    @property
    def address(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.messageDelayLevel)


def load_broker_config(path: str | Path | None = None,
                       overrides: dict[str, str] | None = None
                       ) -> tuple[BrokerConfig, StoreConfig, list[str]]:
    """Broker and store settings from a broker.conf (and overrides); unknown keys are
    returned and logged, wrong values raise ConfigError naming the key."""
    values: dict[str, str] = read_properties(path) if path else {}
    values.update(overrides or {})
    tls, values = split_tls(values, path)
    broker, rest = build(BrokerConfig, values)
    broker.tls = tls  # type: ignore[misc]  # (per broker: ClassVar keeps it from the keys)
    if broker.replicated_log or broker.brokerRole is BrokerRole.SLAVE:
        needs_tls_links(tls, "a replicated broker")
    store, unknown = build(StoreConfig, {k: values[k] for k in rest})
    for text in explain_unknown(unknown, BrokerConfig, StoreConfig):
        log.warning("unknown config key ignored: %s", text)
    return broker, store, unknown
