"""The name server's route table: brokers, their clusters, and the queues of each topic.

Plain state with a clock passed in, so expiry is testable without waiting.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..remoting.codes import PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

MASTER_ID = 0


@dataclass
class QueueData:
    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int = PERM_READ | PERM_WRITE
    topicSysFlag: int = 0

    def to_json(self) -> dict:
        # "topicSynFlag" is RocketMQ's own spelling in the route JSON
        return {"brokerName": self.brokerName, "readQueueNums": self.readQueueNums,
                "writeQueueNums": self.writeQueueNums, "perm": self.perm,
                "topicSynFlag": self.topicSysFlag}


@dataclass
class BrokerData:
    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"cluster": self.cluster, "brokerName": self.brokerName,
                "brokerAddrs": {str(k): v for k, v in sorted(self.brokerAddrs.items())}}


@dataclass
class LiveBroker:
    last_update: float
    data_version: dict
    ha_server_addr: str
    cluster: str
    broker_name: str
    broker_id: int
    grpc_addr: str = ""  # its RocketMQ 5 (gRPC) endpoint, when it serves one


def _state_version(data_version) -> int:
    """A registration's stateVersion (0 when absent or not a number: a client's bytes)."""
    try:
        return int(data_version.get("stateVersion", 0)) if isinstance(data_version, dict) else 0
    except (TypeError, ValueError, OverflowError):
        return 0


class RouteTable:
    def __init__(self, expire_after_s: float = 120.0):
        self.expire_after_s = expire_after_s
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}  # by broker name
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, LiveBroker] = {}  # by broker address

    def register(self, *, cluster: str, broker_name: str, broker_addr: str, broker_id: int,
                 ha_server_addr: str, topics: dict[str, dict], data_version: dict,
                 now: float, grpc_addr: str = "") -> dict:
        """A broker's registration or heartbeat; returns what the broker should learn
        (its master's address and HA address, for slaves). A registration for an id that
        another live address holds with a newer stateVersion (in controller mode, the
        master epoch) is ignored, as RocketMQ's: a deposed master that wakes up and still
        says it is the master must not take the route from the real one."""
        bd = self.brokers.get(broker_name)
        holder = bd.brokerAddrs.get(broker_id) if bd is not None else None
        if holder is not None and holder != broker_addr and holder in self.live and \
                _state_version(self.live[holder].data_version) > _state_version(data_version):
            log.warning("broker %s registers as id %d of %s with stateVersion %d, but %s holds "
                        "that id with %d: ignored", broker_addr, broker_id, broker_name,
                        _state_version(data_version), holder,
                        _state_version(self.live[holder].data_version))
            return {"masterAddr": "", "haServerAddr": ""}
        self.clusters.setdefault(cluster, set()).add(broker_name)
        if bd is None:
            bd = self.brokers[broker_name] = BrokerData(cluster, broker_name)
        # one address per id; an address that moved to another id leaves its old one
        for bid, addr in list(bd.brokerAddrs.items()):
            if addr == broker_addr and bid != broker_id:
                del bd.brokerAddrs[bid]
        bd.brokerAddrs[broker_id] = broker_addr
        self.live[broker_addr] = LiveBroker(now, data_version, ha_server_addr, cluster,
                                            broker_name, broker_id, grpc_addr)
        if broker_id == MASTER_ID:
            self._replace_topics(broker_name, topics)
        out = {"masterAddr": "", "haServerAddr": ""}
        if broker_id != MASTER_ID:
            master = bd.brokerAddrs.get(MASTER_ID)
            if master:
                out["masterAddr"] = master
                live = self.live.get(master)
                out["haServerAddr"] = live.ha_server_addr if live else ""
        return out

    def _replace_topics(self, broker_name: str, topics: dict[str, dict]) -> None:
        for topic in list(self.topic_queues):
            if topic not in topics:
                self._drop_topic_of(topic, broker_name)
        for name, tc in topics.items():
            self.topic_queues.setdefault(name, {})[broker_name] = QueueData(
                broker_name, int(tc.get("readQueueNums", 4)), int(tc.get("writeQueueNums", 4)),
                int(tc.get("perm", PERM_READ | PERM_WRITE)), int(tc.get("topicSysFlag", 0)))

    def _drop_topic_of(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queues.get(topic)
        if queues and broker_name in queues:
            del queues[broker_name]
            if not queues:
                del self.topic_queues[topic]

    def unregister(self, broker_addr: str) -> bool:
        live = self.live.pop(broker_addr, None)
        if live is None:
            return False
        bd = self.brokers.get(live.broker_name)
        if bd is not None:
            for bid, addr in list(bd.brokerAddrs.items()):
                if addr == broker_addr:
                    del bd.brokerAddrs[bid]
            if not bd.brokerAddrs:
                del self.brokers[live.broker_name]
                names = self.clusters.get(live.cluster)
                if names is not None:
                    names.discard(live.broker_name)
                    if not names:
                        del self.clusters[live.cluster]
                for topic in list(self.topic_queues):
                    self._drop_topic_of(topic, live.broker_name)
        return True

    def expire(self, now: float) -> list[str]:
        """Forget brokers that have not heartbeated within expire_after_s."""
        gone = [addr for addr, lb in self.live.items()
                if now - lb.last_update > self.expire_after_s]
        for addr in gone:
            self.unregister(addr)
        return gone

    def route(self, topic: str) -> dict | None:
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        brokers = [self._with_grpc(self.brokers[name].to_json()) for name in sorted(queues)
                   if name in self.brokers]
        return {"orderTopicConf": None,
                "queueDatas": [q.to_json() for _, q in sorted(queues.items())],
                "brokerDatas": brokers, "filterServerTable": {}}

    def _with_grpc(self, bd: dict) -> dict:
        """A broker data entry with the gRPC endpoints of its brokers ("grpcAddrs", by id:
        ledgermq's own field, which RocketMQ's remoting clients ignore)."""
        grpc = {bid: self.live[addr].grpc_addr for bid, addr in bd["brokerAddrs"].items()
                if addr in self.live and self.live[addr].grpc_addr}
        if grpc:
            bd["grpcAddrs"] = grpc
        return bd

    def cluster_info(self) -> dict:
        return {"brokerAddrTable": {n: b.to_json() for n, b in sorted(self.brokers.items())},
                "clusterAddrTable": {c: sorted(n) for c, n in sorted(self.clusters.items())}}

    def topics(self) -> list[str]:
        return sorted(self.topic_queues)
