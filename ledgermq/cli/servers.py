"""Running servers: dev, namesrv, broker (and the store demo)."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import click

from . import main

DEV_METRICS_PORT = 5557  # `ledgermq dev` without -c: metrics on (RocketMQ 5's port)
DEV_GRPC_PORT = 8081  # `ledgermq dev` without -c: RocketMQ 5 clients (its proxy's port)
DEV_CONSOLE_PORT = 8080  # `ledgermq dev`: the web console (the RocketMQ Dashboard's port)


@main.command("store-demo")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Store directory (default: a temporary one).")
@click.option("--messages", default=100_000, show_default=True, help="Messages to append.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def store_demo(data: Path | None, messages: int, as_json: bool) -> None:
    """Append messages to a store, read them back through the consume queue, and report."""
    from ..store import MessageStore, StoreConfig
    from ..wire.message import decode_message

    root = data or Path(tempfile.mkdtemp(prefix="ledgermq-demo-"))
    cfg = StoreConfig(storePathRootDir=str(root), mappedFileSizeCommitLog=64 << 20,
                      maxHashSlotNum=10_000, maxIndexNum=40_000)
    store = MessageStore(cfg)
    report = store.open()
    topic, batch = "DemoTopic", 1000
    t0 = time.perf_counter()
    sent = 0
    while sent < messages:
        n = min(batch, messages - sent)
        bodies = [b"message %08d " % (sent + i) + b"." * 80 for i in range(n)]
        result = store.put(store.encode(topic, 0, bodies, b"TAGS\x01demo\x02", "demo"))
        if not result.ok:
            raise click.ClickException(f"append failed: {result.status.value} {result.error}")
        sent += n
    wrote = time.perf_counter() - t0
    t0 = time.perf_counter()
    offset, read, last = store.min_offset_in_queue(topic, 0), 0, None
    while True:
        got = store.get_messages(topic, 0, offset, max_count=1000, max_bytes=1 << 30)
        if not got.message_count:
            break
        read += got.message_count
        offset = got.next_begin_offset
        last = got.messages()[-1]
    last = decode_message(last) if last is not None else None
    readt = time.perf_counter() - t0
    summary = {"store": str(root), "recovered_from_crash": report.crashed,
               "appended": sent, "append_msgs_per_s": round(sent / wrote),
               "read": read, "read_msgs_per_s": round(read / readt) if readt else None,
               "queue_max_offset": store.max_offset_in_queue(topic, 0),
               "last_body": last.body.decode() if last else None}
    store.close()
    click.echo(json.dumps(summary, indent=None if as_json else 2))


def _broker_settings(conf: Path | None, overrides: dict[str, str]):
    from ..broker import load_broker_config
    return load_broker_config(conf, {k: v for k, v in overrides.items() if v is not None})


def _unknown(keys: list[str]) -> str:
    """Unknown broker.conf keys for the ready line, each with its likely spelling."""
    from ..broker.config import BrokerConfig
    from ..runtime.config import explain_unknown
    from ..store import StoreConfig
    return ", ".join(explain_unknown(keys, BrokerConfig, StoreConfig))


def _ready(what: dict, as_json: bool) -> None:
    """One line on stdout once listening: scripts and tests wait for it."""
    if as_json:
        click.echo(json.dumps({"ready": True, **what}))
    else:
        click.echo("ready: " + " ".join(f"{k}={v}" for k, v in what.items()))
    sys.stdout.flush()


def LOGIN_OPTS(f):
    """The console's login (HTTP Basic): required when it binds beyond loopback."""
    f = click.option("--console-password-file", default=None,
                     type=click.Path(exists=True, dir_okay=False),
                     help="A file holding the console's password.")(f)
    return click.option("--console-user", default=None,
                        help="The console's login user (with --console-password-file).")(f)


@main.command()
@click.option("-c", "--config", "conf", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help="A broker.conf (RocketMQ properties format).")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Store directory (storePathRootDir); default ~/.ledgermq/dev.")
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--port", default=None, type=int, help="Broker port (listenPort; default 10911).")
@click.option("--console-port", default=None, type=int,
              help=f"The web console's port (default {DEV_CONSOLE_PORT} without -c, off with "
                   "-c; 0: any free port; -1: off).")
@LOGIN_OPTS
@click.option("--json", "as_json", is_flag=True, help="Print the ready line as JSON.")
def dev(conf: Path | None, data: Path | None, namesrv_port: int, port: int | None,
        console_port: int | None, console_user: str | None,
        console_password_file: str | None, as_json: bool) -> None:
    """Name server + broker in one process on 127.0.0.1 (the embedded default), and the
    web console."""
    from ..broker import Broker
    from ..console import Console
    from ..console.access import load_login
    from ..namesrv import NamesrvConfig, NameServer
    from ..runtime.foreground import run, serve_until

    data = data or Path.home() / ".ledgermq" / "dev"
    bcfg, scfg, unknown = _broker_settings(conf, {"storePathRootDir": str(data),
                                            "listenPort": None if port is None else str(port)})
    if conf is None or not bcfg.namesrvAddr:
        bcfg.namesrvAddr = f"127.0.0.1:{namesrv_port}"
    if conf is None and not bcfg.metricsPort:
        bcfg.metricsPort = DEV_METRICS_PORT  # `make run`: watch it (RocketMQ 5's port)
    if conf is None and bcfg.grpcServerPort < 0:
        bcfg.grpcServerPort = DEV_GRPC_PORT
    if conf is None or "enablePropertyFilter" not in conf.read_text():
        # a developer's broker serves every subscription type; a production broker.conf
        # opts in to SQL92 (evaluated per message on the broker), as in RocketMQ
        bcfg.enablePropertyFilter = True
    if console_port is None:
        console_port = -1 if conf is not None else DEV_CONSOLE_PORT
    login = load_login(bcfg.bindAddress, console_user, console_password_file) \
        if console_port >= 0 else None
    ncfg = NamesrvConfig(listenPort=namesrv_port)
    ncfg.tls = bcfg.tls  # one process, one set of TLS keys
    namesrv = NameServer(ncfg)

    async def main_(stop):
        broker = Broker(bcfg, scfg, standalone=True)
        await namesrv.start()
        console = None
        try:
            if namesrv_port == 0:
                broker.config.namesrvAddr = namesrv.address
            await broker.start()
            if console_port >= 0:
                console = Console(namesrv.address, bcfg.bindAddress, console_port, login=login)
                await console.start()
            _ready({"namesrv": namesrv.address, "broker": broker.address,
                    "console": console.url if console else None,
                    "metrics": f"http://{bcfg.bindAddress}:{broker.metrics_port}/metrics"
                    if broker.metrics_port else None,
                    "grpc": broker.grpc_address if broker.grpc_port else None,
                    "store": str(scfg.root), "unknownKeys": _unknown(unknown)}, as_json)
            await serve_until(stop)
            await broker.stop()
        finally:
            if console is not None:
                await console.stop()
            await namesrv.stop()

    run(main_)


@main.command()
@click.option("--port", default=None, type=int, help="listenPort (default 9876)")
@click.option("--bind", default=None, help="bindAddress (default 127.0.0.1)")
@click.option("-c", "--config", "conf", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help="A namesrv.conf; with enableControllerInNamesrv=true it also runs a "
                   "controller (controller.conf keys in the same file).")
@click.option("--metrics-port", default=None, type=int, help="metricsPort: Prometheus metrics "
              "over HTTP (default 0: off).")
@click.option("--json", "as_json", is_flag=True)
def namesrv(port: int | None, bind: str | None, conf: Path | None, metrics_port: int | None,
            as_json: bool) -> None:
    """Run a name server (and, if configured, an embedded controller)."""
    from ..runtime.config import build, read_properties
    from ..metrics.serving import port_of
    from ..namesrv import NamesrvConfig, NameServer
    from ..remoting.tls import split_tls
    from ..runtime.foreground import run, serve_until

    values = read_properties(conf) if conf else {}
    values.update({k: str(v) for k, v in (("listenPort", port), ("bindAddress", bind),
                                          ("metricsPort", metrics_port)) if v is not None})
    tls, values = split_tls(values, conf)
    ncfg, rest = build(NamesrvConfig, values)
    ncfg.tls = tls
    ns = NameServer(ncfg)
    ready = {}
    if values.get("enableControllerInNamesrv", "false").lower() == "true":
        from ..controller.config import load_controller_config
        from ..controller.server import ControllerServer
        ccfg = load_controller_config(None, {k: values[k] for k in rest}, tls=tls)
        ns.controller = ControllerServer(ccfg)
        ready["controller"] = ns.controller.address
    elif rest:
        click.echo(f"warning: unknown config keys ignored: {', '.join(sorted(rest))}", err=True)

    async def main_(stop):
        await ns.start()
        if ns.metrics_server is not None:
            ready["metrics"] = f"http://{ncfg.bindAddress}:{port_of(ns.metrics_server)}/metrics"
        _ready({"namesrv": ns.address, **ready}, as_json)
        await serve_until(stop)
        await ns.stop()

    run(main_)


@main.command()
@click.option("-c", "--config", "conf", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A controller.conf (controllerDLegerPeers, controllerDLegerSelfId, "
                   "controllerStorePath, ...).")
@click.option("--json", "as_json", is_flag=True)
def controller(conf: Path, as_json: bool) -> None:
    """Run a controller node of controller mode (S1)."""
    from ..controller.config import load_controller_config
    from ..controller.server import ControllerServer
    from ..runtime.foreground import run, serve_until

    node = ControllerServer(load_controller_config(conf))

    async def main_(stop):
        await node.start()
        _ready({"controller": node.address, "id": node.self_id}, as_json)
        await serve_until(stop)
        await node.stop()

    run(main_)


@main.command()
@click.option("-c", "--config", "conf", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-n", "--namesrv", "namesrv_addr", default=None, help="namesrvAddr override")
@click.option("--json", "as_json", is_flag=True)
def broker(conf: Path, namesrv_addr: str | None, as_json: bool) -> None:
    """Run a broker from a broker.conf."""
    from ..broker import Broker
    from ..runtime.foreground import run, serve_until

    bcfg, scfg, unknown = _broker_settings(conf, {"namesrvAddr": namesrv_addr})
    b = Broker(bcfg, scfg)

    async def main_(stop):
        await b.start()
        _ready({"broker": b.address, "brokerName": bcfg.brokerName,
                "unknownKeys": _unknown(unknown)}, as_json)
        await serve_until(stop)
        await b.stop()

    run(main_)


@main.command()
@click.option("--port", default=9880, show_default=True, help="Where brokers and producers "
              "reach it (the brokers' controlNodeAddr).")
@click.option("--bind", default="127.0.0.1", show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path.home() / ".ledgermq" / "controlnode", show_default=True,
              help="Where its state and message cache live (survive a restart).")
@click.option("--master-timeout", default=1000, show_default=True,
              help="ms without a master heartbeat before a slave takes over.")
@click.option("--metrics-port", default=0, show_default=True,
              type=click.IntRange(0, 65535), help="Prometheus metrics over HTTP (0: off).")
@click.option("--tls-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="A properties file of tls.* keys (tls.server.mode, "
              "tls.server.certPath, ..., tls.enable for its links to the brokers).")
@click.option("--cluster-secret-file", "secret_file", default="",
              help="A file holding the cluster secret (the brokers' clusterSecret): brokers "
                   "must prove it to heartbeat and hand over messages.")
@click.option("--peers", default="", help="A control node group: every node as "
              "id-host:port;id-host:port;... (the brokers' controlNodeAddr lists the same "
              "host:port); the node serves at its own address, --port and --bind unused. "
              "Empty: a single control node.")
@click.option("--id", "node_id", default="", help="This node's id among --peers.")
@click.option("--json", "as_json", is_flag=True)
def controlnode(port: int, bind: str, directory: Path, master_timeout: int,
                metrics_port: int, tls_config: Path | None, secret_file: str, peers: str,
                node_id: str, as_json: bool) -> None:
    """Run the control node of checkpoint-mode broker groups (S3), alone or as one node of
    a control node group (Raft: any node can lead, so one can die without stopping
    failovers)."""
    from ..runtime.config import ConfigError, read_properties
    from ..controlnode import ControlNode
    from ..peer_auth.core import PeerAuth, load_secret
    from ..remoting.tls import split_tls
    from ..replication.checkpoint import ControlConfig
    from ..runtime.foreground import run, serve_until

    if master_timeout <= 0:
        raise click.BadParameter("--master-timeout must be positive")
    tls, rest = split_tls(read_properties(tls_config), tls_config) if tls_config \
        else (None, {})
    if rest:
        raise click.BadParameter(f"not tls.* keys: {', '.join(sorted(rest))}",
                                 param_hint="--tls-config")
    try:
        auth = PeerAuth(load_secret("", secret_file, file_key="--cluster-secret-file"))
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None
    extra = {"tls": tls} if tls else {}
    if peers:
        from ..controlnode.replicated import ReplicatedControlNode
        from ..drivers.raft import parse_peers
        try:
            group = parse_peers(peers, "--peers")
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--peers") from None
        if node_id not in group:
            raise click.BadParameter(f"{node_id!r} is not among the ids of --peers "
                                     f"({', '.join(sorted(group))})", param_hint="--id")
        node = ReplicatedControlNode(node_id, group, directory, ControlConfig(
            master_timeout_ms=master_timeout), metrics_port=metrics_port, auth=auth, **extra)
        served = group[node_id]
    else:
        node = ControlNode(directory, bind, port, ControlConfig(
            master_timeout_ms=master_timeout), metrics_port=metrics_port, auth=auth, **extra)
        served = ""

    async def main_(stop):
        from ..metrics.serving import port_of
        await node.start()
        ready = {"controlNode": served or f"{bind}:{node.port}", "dir": str(directory)}
        if node.metrics_server is not None:
            ready["metrics"] = f"http://{bind}:{port_of(node.metrics_server)}/metrics"
        _ready(ready, as_json)
        await serve_until(stop)
        await node.stop()

    run(main_)
