"""controller.conf: RocketMQ's controller keys (and the same keys in namesrv.conf when the
controller runs inside the name server, enableControllerInNamesrv=true)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..drivers.raft import parse_peers
from ..peer_auth.core import load_secret
from ..remoting.tls import DISABLED, Tls, needs_tls_links, split_tls
from ..runtime.config import ConfigError, build, check, positive, read_properties

log = logging.getLogger(__name__)


@dataclass
class ControllerConfig:
    controllerDLegerGroup: str = "group1"
    controllerDLegerPeers: str = "n0-127.0.0.1:9878"  # id-host:port;... (raft + requests)
    controllerDLegerSelfId: str = "n0"
    controllerStorePath: str = str(Path.home() / ".ledgermq" / "controller")
    enableElectUncleanMaster: bool = False
    # a broker silent this long is not alive (RocketMQ sends it per broker; one value here)
    brokerNotActiveTimeoutMillis: int = field(default=3000, metadata=check(positive))
    electionTimeoutMs: int = field(default=300, metadata=check(positive))
    heartbeatIntervalMs: int = field(default=100, metadata=check(positive))
    enableControllerInNamesrv: bool = False
    metricsPort: int = field(default=0, metadata=check(lambda v: None if 0 <= v < 65536
                                                        else "must be a TCP port"))  # 0: off
    # the cluster's shared secret (ledgermq/peer_auth/core.py): controllers among themselves,
    # and brokers registering, heartbeating, electing, prove they know it. "": off
    clusterSecret: str = field(default="", repr=False)
    clusterSecretFile: str = ""
    tls: ClassVar[Tls] = DISABLED  # from the tls.* keys

    def __post_init__(self) -> None:
        self.cluster_secret = load_secret(self.clusterSecret, self.clusterSecretFile)
        try:
            peers = parse_peers(self.controllerDLegerPeers, "controllerDLegerPeers")
        except ValueError as e:
            raise ConfigError(f"controllerDLegerPeers={self.controllerDLegerPeers!r}: "
                              f"{e}") from None
        if self.controllerDLegerSelfId not in peers:
            raise ConfigError(f"controllerDLegerSelfId={self.controllerDLegerSelfId!r} is "
                              f"not one of the controllerDLegerPeers ids {sorted(peers)}")

    @property
    def peers(self) -> dict[str, str]:
        return parse_peers(self.controllerDLegerPeers, "controllerDLegerPeers")


def load_controller_config(path: str | Path | None, overrides: dict[str, str] | None = None,
                           *, others_ok: bool = False, tls: Tls | None = None
                           ) -> ControllerConfig:
    """From a controller.conf; unknown keys are logged (or left to the name server's
    config when `others_ok`), wrong values raise ConfigError naming the key."""
    values = read_properties(path) if path else {}
    values.update(overrides or {})
    file_tls, values = split_tls(values, path)
    config, unknown = build(ControllerConfig, values)
    config.tls = tls or file_tls  # `tls`: the name server's, when embedded in one
    if len(config.peers) > 1:
        needs_tls_links(config.tls, "several controllers")
    if not others_ok:
        for key in unknown:
            log.warning("unknown config key %r ignored (check its spelling)", key)
    return config
