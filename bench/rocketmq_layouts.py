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
    group: str = ""  # a broker's brokerName


def _namesrv(free: Ports) -> Node:
    (port,) = free(1)
    return Node("namesrv", "namesrv", f"127.0.0.1:{port}",
                {"listenPort": port, "bindAddress": "127.0.0.1"})


def _broker(d: Path, name: str, port: int, namesrv: Node | str, *, ip: str = "127.0.0.1",
            group: str = GROUP, cluster: str = CLUSTER, **keys: object) -> Node:
    store = d / name / "store"
    return Node(name, "broker", f"{ip}:{port}", {
        "brokerClusterName": cluster, "brokerName": group, "listenPort": port,
        "bindAddress": ip,
        "namesrvAddr": namesrv if isinstance(namesrv, str) else namesrv.addr,
        "brokerIP1": ip, "brokerIP2": ip,
        "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
        "mappedFileSizeCommitLog": 64 << 20, "autoCreateTopicEnable": "true",
        "flushDiskType": "ASYNC_FLUSH", **keys}, group=group)


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


def _dledger_group(d: Path, names: list[str], ips: list[str], ports: list[int],
                   peer_ports: list[int], namesrv: str, group: str = GROUP,
                   cluster: str = CLUSTER) -> list[Node]:
    peers = ";".join(f"n{i}-{ip}:{p}" for i, (ip, p) in enumerate(zip(ips, peer_ports)))
    return [_broker(d, name, port, namesrv, ip=ip, group=group, cluster=cluster,
                    enableDLegerCommitLog="true", dLegerGroup=group, dLegerPeers=peers,
                    dLegerSelfId=f"n{i}",
                    # as RocketMQ's own DLedger quick-start configuration has it
                    sendMessageThreadPoolNums=16)
            for i, (name, ip, port) in enumerate(zip(names, ips, ports))]


def dledger(d: Path, free: Ports, broker_ports: Ports) -> list[Node]:
    ns = _namesrv(free)
    names = [f"broker-n{i}" for i in range(3)]
    return [ns, *_dledger_group(d, names, ["127.0.0.1"] * 3, broker_ports(3), free(3),
                                ns.addr)]


def _controllers(d: Path, names: list[str], ips: list[str], ports: list[int],
                 tight: bool) -> list[Node]:
    # a controller serves brokers on its DLedger peer port: there is no second port
    peers = ";".join(f"n{i}-{ip}:{p}" for i, (ip, p) in enumerate(zip(ips, ports)))
    return [Node(name, "controller", f"{ip}:{port}", {
        "bindAddress": ip, "controllerDLegerGroup": "anchor-controllers",
        "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}",
        "controllerStorePath": d / name / "store",
        "enableElectUncleanMaster": "false", "notifyBrokerRoleChanged": "true",
        **({"scanNotActiveBrokerInterval": 1000} if tight else {})})
        for i, (name, ip, port) in enumerate(zip(names, ips, ports))]


def _controller_brokers(d: Path, names: list[str], ips: list[str], ports: list[int],
                        ha_ports: list[int], namesrv: str, controllers: list[Node],
                        tight: bool, group: str = GROUP, cluster: str = CLUSTER) -> list[Node]:
    tight_keys = {"controllerHeartBeatTimeoutMills": 3000, "brokerHeartbeatInterval": 1000} \
        if tight else {}
    return [_broker(d, name, port, namesrv, ip=ip, group=group, cluster=cluster, brokerId=-1,
                    brokerRole="SLAVE", enableControllerMode="true",
                    controllerAddr=";".join(c.addr for c in controllers),
                    allAckInSyncStateSet="true", haListenPort=ha, **tight_keys)
            for name, ip, port, ha in zip(names, ips, ports, ha_ports)]


def controller(d: Path, free: Ports, broker_ports: Ports, tight: bool = False) -> list[Node]:
    """tight: RocketMQ's tightest sane failure detection rather than its defaults (a broker
    unheard of for 3 s, not 10 s, is dead; controllers look every 1 s, not 5 s)."""
    ns = _namesrv(free)
    local = ["127.0.0.1"] * 3
    controllers = _controllers(d, [f"controller-n{i}" for i in range(3)], local, free(3), tight)
    return [ns, *controllers,
            *_controller_brokers(d, [f"broker-n{i}" for i in range(3)], local, broker_ports(3),
                                 free(3), ns.addr, controllers, tight)]


# on test hosts (the chaos runs, bench/rocketmq_chaos.py) every process has a host, so an
# address, of its own: RocketMQ's default ports
NAMESRV_PORT, BROKER_PORT, DLEDGER_PORT, CONTROLLER_PORT, HA_PORT = 9876, 10911, 40911, 9878, \
    10912


def on_hosts(mode: str, d: Path, hosts: dict[str, str], ip: Callable[[str], str]) -> list[Node]:
    """`mode` (dledger or controller, tight) laid out on test hosts named as ledgermq's chaos
    layout names them (`hosts`: name -> role, cluster.names), so one seed plans the same
    windows for both; every group in cluster DefaultCluster, as ledgermq's."""
    def named(role: str) -> list[str]:
        return [n for n, r in hosts.items() if r == role]
    namesrvs = [Node(n, "namesrv", f"{ip(n)}:{NAMESRV_PORT}",
                     {"listenPort": NAMESRV_PORT, "bindAddress": ip(n)})
                for n in named("namesrv")]
    ns = ";".join(n.addr for n in namesrvs)
    out = list(namesrvs)
    ctl = _controllers(d, named("controller"), [ip(n) for n in named("controller")],
                       [CONTROLLER_PORT] * len(named("controller")), tight=True)
    out += ctl
    for group in sorted({r.split(":", 1)[1] for r in hosts.values() if r.startswith("broker:")}):
        names = named(f"broker:{group}")
        ips, k = [ip(n) for n in names], len(names)
        if mode == "dledger":
            out += _dledger_group(d, names, ips, [BROKER_PORT] * k, [DLEDGER_PORT] * k, ns,
                                  group, "DefaultCluster")
        elif mode == "controller":
            out += _controller_brokers(d, names, ips, [BROKER_PORT] * k, [HA_PORT] * k, ns,
                                       ctl, True, group, "DefaultCluster")
        else:
            raise ValueError(f"RocketMQ on test hosts: dledger or controller, not {mode}")
    return out


LAYOUTS: dict[str, Callable[[Path, Ports, Ports], list[Node]]] = {
    "single": single, "proxy": proxy, "sync": sync, "dledger": dledger, "controller": controller,
    "controller-tight": lambda d, free, ports: controller(d, free, ports, tight=True)}
