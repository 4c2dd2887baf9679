"""TLS for a local cluster (`ledgermq cluster up --tls`): a CA of the cluster's own in
DIR/tls, one certificate for its servers, and the tls.properties every server reads
(tls.config.file): enforcing (or permissive) on every port it serves, TLS on every link it
dials."""
from __future__ import annotations

import ssl
from pathlib import Path

TLS_PROPERTIES = """\
# written by `ledgermq cluster up --tls`; paths are relative to this file
tls.server.mode={mode}
tls.server.certPath=server.pem
tls.server.keyPath=server-key.pem
tls.enable=true
tls.client.trustCertPath=ca.pem
"""


def make_cluster_tls(d: Path, hosts: set[str], mode: str = "enforcing") -> Path:
    """DIR/tls/{ca.pem, server.pem, server-key.pem, tls.properties} for servers in `mode`
    (enforcing or permissive); the certificate names every host a process of the cluster
    is dialled at. Returns tls.properties."""
    if mode not in ("enforcing", "permissive"):
        raise ValueError(f"TLS mode {mode!r}: expected enforcing or permissive")
    from .certs import CertAuthority
    tls_dir = d / "tls"
    ca = CertAuthority.create(tls_dir, f"ledgermq cluster CA ({d.name})")
    ca.issue(tls_dir, "server", sorted(hosts | {"127.0.0.1", "localhost"}))
    props = tls_dir / "tls.properties"
    props.write_text(TLS_PROPERTIES.format(mode=mode))
    return props


def with_tls(args: list[str], flag: str, tls_file: Path | None) -> list[str]:
    """A server's arguments, with `flag` naming tls.properties when the cluster has TLS."""
    return args + [flag, str(tls_file)] if tls_file else args


def tls_conf_line(tls_file: Path | None) -> str:
    """The config-file line that gives a server the cluster's TLS ("" without)."""
    return f"tls.config.file={tls_file}\n" if tls_file else ""


def cluster_client_tls(state: dict) -> ssl.SSLContext | None:
    """What a client of the cluster in `state` (cluster.json) connects with."""
    if not state.get("tls"):
        return None
    from ..remoting.tls import client_context
    return client_context(state["tls"]["ca"])
