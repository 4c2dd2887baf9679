"""The config files `cluster up` writes for each server of a local cluster: a broker's
broker.conf and a controller's controller.conf."""
from __future__ import annotations

from pathlib import Path


def broker_conf(mode: str, i: int, n: int, ports: dict, d: Path, extra: dict[str, str],
                group: str = "broker-a", node: str | None = None,
                addrs: dict[str, str] | None = None) -> str:
    """broker.conf of replica `i` of `n` in `group`; ports["broker"] and ports["repl"] are
    that group's, ports["namesrvs"] every name server's. `addrs` has each address by role:
    "self", "peers" (the group's, by replica), "namesrvs", "controllers", and "control"
    (controlNodeAddr: host:port of each control node); 127.0.0.1 for whatever is not
    given."""
    node = node or f"n{i}"
    a = {"self": "127.0.0.1", "peers": ["127.0.0.1"] * n,
         "namesrvs": ["127.0.0.1"] * len(ports["namesrvs"]),
         "control": ";".join(f"127.0.0.1:{p}" for p in ports.get("controllers", [])),
         "controllers": ["127.0.0.1"] * len(ports.get("controllers", [])), **(addrs or {})}
    conf = {"brokerClusterName": "DefaultCluster", "brokerName": group,
            "listenPort": ports["broker"][i],
            "namesrvAddr": ";".join(f"{h}:{p}" for h, p in zip(a["namesrvs"], ports["namesrvs"])),
            "storePathRootDir": str(d / node / "store"),
            "mappedFileSizeCommitLog": str(64 << 20), "maxHashSlotNum": "100000",
            "maxIndexNum": "400000"}
    if "metrics" in ports:  # Prometheus, each broker on its own port
        conf["metricsPort"] = ports["metrics"][i]
    if "grpc" in ports:  # RocketMQ 5 clients, each broker on its own port
        conf["grpcServerPort"] = ports["grpc"][i]
    if a["self"] != "127.0.0.1":  # listen on, and advertise, the host's own address
        conf.update(brokerIP1=a["self"], bindAddress=a["self"])
    if mode == "dledger":
        peers = ";".join(f"n{k}-{a['peers'][k]}:{ports['repl'][k]}" for k in range(n))
        conf.update(enableDLegerCommitLog="true", dLegerGroup=group, dLegerPeers=peers,
                    dLegerSelfId=f"n{i}")
    else:
        master_role = "ASYNC_MASTER" if mode == "async" else "SYNC_MASTER"
        conf.update(brokerId=str(i), brokerRole=master_role if i == 0 else "SLAVE",
                    haListenPort=str(ports["repl"][i]), haSendHeartbeatInterval="1000",
                    haHousekeepingInterval="5000")
        if mode == "checkpoint":
            conf.update(enableConsistentCheckpoint="true",
                        controlNodeAddr=a["control"])
        if mode == "controller":  # roles come from the controller, not from brokerRole
            del conf["brokerId"], conf["brokerRole"]
            conf.update(enableControllerMode="true", controllerAddr=";".join(
                f"{h}:{p}" for h, p in zip(a["controllers"], ports["controllers"])),
                brokerHeartbeatInterval="200",
                haMaxTimeSlaveNotCatchUp="3000")  # acknowledging: the safe default
    conf.update(extra)
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def controller_conf(k: int, ports: list[int], d: Path, hosts: list[str] | None = None,
                    metrics_port: int = 0, secret_file: str = "") -> str:
    hosts = hosts or ["127.0.0.1"] * len(ports)
    peers = ";".join(f"c{i}-{h}:{p}" for i, (h, p) in enumerate(zip(hosts, ports)))
    return (f"controllerDLegerPeers={peers}\ncontrollerDLegerSelfId=c{k}\n"
            f"controllerStorePath={d / f'c{k}' / 'data'}\nbrokerNotActiveTimeoutMillis=1000\n"
            f"metricsPort={metrics_port}\nclusterSecretFile={secret_file}\n")
