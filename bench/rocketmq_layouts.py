"""The layouts ledgermq runs, written as Apache RocketMQ's own configuration (#29): each
layout is the list of processes to start, in order, with the keys of their .conf files.

- single: one ASYNC_MASTER broker;
- proxy: the same broker inside RocketMQ 5's gRPC proxy (local mode), for the gRPC rows;
- sync: a SYNC_MASTER and its SLAVE (classic HA);
- dledger: three brokers whose commit log is a DLedger group;
- controller: three brokers and three controllers (DLedger-replicated), with
  allAckInSyncStateSet=true as ledgermq's default has it; controller-tight the same with
  RocketMQ's tightest sane failure detection.

Every layout has one name server, serves on 127.0.0.1 (bindAddress, brokerIP1/brokerIP2:
RocketMQ's HA and DLedger ports bind every address, whatever these say) and uses
64 MB commit-log segments. Flushing is RocketMQ's default, ASYNC_FLUSH, as ledgermq's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

Ports = Callable[[int], list[int]]
CLUSTER, GROUP = "AnchorCluster", "anchor-a"


@dataclass
class Node:
    name: str
    kind: str  # namesrv, controller or broker
    addr: str  # 127.0.0.1:port it serves clients (or brokers, for a controller) on
    conf: dict[str, object]
    proxy: dict[str, object] | None = None  # a proxy's own keys (rmq-proxy.json)


def _namesrv(free: Ports) -> Node:
    (port,) = free(1)
    return Node("namesrv", "namesrv", f"127.0.0.1:{port}",
                {"listenPort": port, "bindAddress": "127.0.0.1"})


def _broker(d: Path, name: str, port: int, namesrv: Node, **keys: object) -> Node:
    store = d / name / "store"
    return Node(name, "broker", f"127.0.0.1:{port}", {
        "brokerClusterName": CLUSTER, "brokerName": GROUP, "listenPort": port,
        "bindAddress": "127.0.0.1",
        "namesrvAddr": namesrv.addr, "brokerIP1": "127.0.0.1", "brokerIP2": "127.0.0.1",
        "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
        "mappedFileSizeCommitLog": 64 << 20, "autoCreateTopicEnable": "true",
        "flushDiskType": "ASYNC_FLUSH", **keys})


def single(d: Path, free: Ports, broker_ports: Ports) -> list[Node]:
    ns = _namesrv(free)
    (port,) = broker_ports(1)
    return [ns, _broker(d, "broker-n0", port, ns, brokerId=0, brokerRole="ASYNC_MASTER")]


def proxy(d: Path, free: Ports, broker_ports: Ports) -> list[Node]:
    """The single broker behind RocketMQ 5's gRPC proxy in local mode (one process: the
    proxy starts the broker inside itself). Its gRPC port binds every address; there is
    no key to narrow it."""
    ns = _namesrv(free)
    (port,), (grpc, remoting) = broker_ports(1), free(2)
    broker = _broker(d, "proxy-n0", port, ns, brokerId=0, brokerRole="ASYNC_MASTER")
    return [ns, Node("proxy-n0", "proxy", broker.addr, broker.conf, {
        "rocketMQClusterName": CLUSTER, "namesrvAddr": ns.addr, "grpcServerPort": grpc,
        "remotingListenPort": remoting, "proxyMode": "local"})]


def sync(d: Path, free: Ports, broker_ports: Ports) -> list[Node]:
    ns = _namesrv(free)
    (p0, p1), (ha0, ha1) = broker_ports(2), free(2)
    return [ns,
            _broker(d, "broker-n0", p0, ns, brokerId=0, brokerRole="SYNC_MASTER",
                    haListenPort=ha0),
            _broker(d, "broker-n1", p1, ns, brokerId=1, brokerRole="SLAVE", haListenPort=ha1)]


def dledger(d: Path, free: Ports, broker_ports: Ports) -> list[Node]:
    ns = _namesrv(free)
    ports, peer_ports = broker_ports(3), free(3)
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
    return [ns, *(_broker(d, f"broker-n{i}", port, ns, enableDLegerCommitLog="true",
                          dLegerGroup=GROUP, dLegerPeers=peers, dLegerSelfId=f"n{i}",
                          # as RocketMQ's own DLedger quick-start configuration has it
                          sendMessageThreadPoolNums=16)
                  for i, port in enumerate(ports))]


def controller(d: Path, free: Ports, broker_ports: Ports, tight: bool = False) -> list[Node]:
    """tight: RocketMQ's tightest sane failure detection rather than its defaults (a broker
    unheard of for 3 s, not 10 s, is dead; controllers look every 1 s, not 5 s)."""
    ns = _namesrv(free)
    c_tight = {"scanNotActiveBrokerInterval": 1000} if tight else {}
    b_tight = {"controllerHeartBeatTimeoutMills": 3000, "brokerHeartbeatInterval": 1000} \
        if tight else {}
    c_ports = free(3)
    # a controller serves brokers on its DLedger peer port: there is no second port
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(c_ports))
    controllers = [Node(f"controller-n{i}", "controller", f"127.0.0.1:{port}", {
        "bindAddress": "127.0.0.1", "controllerDLegerGroup": "anchor-controllers",
        "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
        "controllerStorePath": d / f"controller-n{i}" / "store",
        "enableElectUncleanMaster": "false", "notifyBrokerRoleChanged": "true", **c_tight})
        for i, port in enumerate(c_ports)]
    addrs = ";".join(c.addr for c in controllers)
    ports, ha_ports = broker_ports(3), free(3)
    return [ns, *controllers,
            *(_broker(d, f"broker-n{i}", port, ns, brokerId=-1, brokerRole="SLAVE",
                      enableControllerMode="true", controllerAddr=addrs,
                      allAckInSyncStateSet="true", haListenPort=ha, **b_tight)
              for i, (port, ha) in enumerate(zip(ports, ha_ports)))]


LAYOUTS: dict[str, Callable[[Path, Ports, Ports], list[Node]]] = {
    "single": single, "proxy": proxy, "sync": sync, "dledger": dledger, "controller": controller,
    "controller-tight": lambda d, free, ports: controller(d, free, ports, tight=True)}
