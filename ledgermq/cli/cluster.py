"""Local replica groups: ledgermq cluster up|status|down."""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from . import _emit, main


@main.group()
def cluster() -> None:
    """Name servers and replica groups as local processes (127.0.0.1)."""


@cluster.command("up")
@click.option("--mode", type=click.Choice(["dledger", "sync", "async", "checkpoint",
                                           "controller"]),
              default="dledger", show_default=True,
              help="dledger: Raft group (S0); sync / async: a SYNC_ / ASYNC_MASTER and slaves "
              "(S2); checkpoint: consistent checkpoint with a control node (S3); controller: "
              "brokers whose master the controller group elects (S1).")
@click.option("--replicas", default=3, show_default=True)
@click.option("--controllers", default=1, show_default=True,
              help="Controller nodes (controller mode; one controller group serves every "
              "broker group), or control nodes (checkpoint mode; more than one: a control "
              "node group, any of which can lead).")
@click.option("--groups", default=1, show_default=True,
              help="Replica groups (broker-a, broker-b, ...), each of --replicas brokers of "
              "the mode; nodes are named a-n0, b-n0, ... when there are several.")
@click.option("--namesrvs", default=1, show_default=True,
              help="Name servers; every broker registers with each, clients take them all "
              "as 'a;b'.")
@click.option("--grpc/--no-grpc", default=True, show_default=True,
              help="Each broker also serves RocketMQ 5 clients (gRPC) on a port of its own.")
@click.option("--tls", type=click.Choice(["enforcing", "permissive"]), default=None,
              is_flag=False, flag_value="enforcing", help="Make a CA and certificates in "
              "DIR/tls; every server serves TLS (--tls: enforcing, TLS only; --tls "
              "permissive: plaintext too, e.g. for RocketMQ's C++ client) and its links use it.")
@click.option("--acl", is_flag=True, help="RocketMQ's ACL on every broker: an admin account "
              "in DIR/acl/ (plain_acl.yml, admin.secret); every request must be signed.")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_up(mode, replicas, controllers, groups, namesrvs, grpc, tls, acl, directory,
               as_json):
    """Start the groups; prints the name servers and each node's name, pid and ports."""
    from ..localcluster.cluster import up
    if replicas < 1:
        raise click.BadParameter("--replicas must be at least 1")
    if controllers < 1:
        raise click.BadParameter("--controllers must be at least 1")
    if not 1 <= groups <= 26:
        raise click.BadParameter("--groups must be in 1..26")
    if namesrvs < 1:
        raise click.BadParameter("--namesrvs must be at least 1")
    try:
        state = up(mode, replicas, directory, controllers=controllers, groups=groups,
                   namesrvs=namesrvs, grpc=grpc, tls=tls or "", acl=acl)
    except (RuntimeError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    cli_tls = f" --tls-ca {state['tls']['ca']}" if tls else ""
    _emit(state, as_json, lambda s: click.echo(
        f"namesrv {s['namesrv']}\n" + "\n".join(
            f"{p['name']:8} pid={p['pid']} port={p['port']}" +
            (f" group={p['group']}" if len(s["groups"]) > 1 and "group" in p else "") +
            (f" replication={p['replPort']}" if "replPort" in p else "") +
            (f" grpc={p['grpcPort']}" if "grpcPort" in p else "")
            for p in s["processes"]) +
        (f"\nTLS ({tls}) on every port: clients trust {s['tls']['ca']} (ledgermq --tls-ca CA ...; "
         "LEDGERMQ_TLS=true LEDGERMQ_TLS_CA=CA; Producer(..., tls=True))" if tls else "") +
        (f"\nACL on every broker: export LEDGERMQ_ACCESS_KEY={s['acl']['accessKey']} "
         f"LEDGERMQ_SECRET_KEY=$(cat {s['acl']['secretKeyFile']}); accounts in "
         f"{s['acl']['aclFile']}" if acl else "") +
        (f"\nnext: ledgermq{cli_tls} admin updateTopic -n {_quoted(s['namesrv'])} -t Demo "
         "-c DefaultCluster" if len(s["groups"]) > 1 else "") +
        f"\nnext: ledgermq{cli_tls} produce -n {_quoted(s['namesrv'])} -t Demo --count 100 "
        "--body 'hello {i}'"
        f"\n      ledgermq cluster status --dir {directory}"))


@cluster.command("status")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_status(directory, as_json):
    """Each process: pid, up or down, group, role, term/epoch, commit and end offsets, lag;
    a health line (one part per group). Exits 1 when a group is degraded (a process down,
    no single master, no quorum)."""
    from ..localcluster.cluster import NoCluster, health, lag, status
    try:
        state = status(directory)
    except NoCluster as e:
        raise click.ClickException(str(e)) from None
    ok, line = health(state)
    state.update(healthy=ok, health=line)

    def render(s):
        several = len(s.get("groups", [])) > 1
        table = Table("name", "pid", "state", *(["group"] if several else []), "role",
                      "term/epoch", "commit", "end", "lag")
        for p in s["processes"]:
            era = p.get("term", p.get("masterEpoch", p.get("epoch", "")))
            end = p.get("end", p.get("ha", {}).get("maxOffset", p.get("ha", {}).get("logEnd")))
            table.add_row(p["name"], str(p["pid"]), "up" if p["alive"] else "DOWN",
                          *([p.get("group", "")] if several else []), p.get("role", ""), str(era), str(p.get("commit", "")),
                          "" if end is None else str(end), _blank(lag(s, p)))
        Console().print(table)
        click.echo(s["health"])
    _emit(state, as_json, render)
    if not ok:
        sys.exit(1)


def _quoted(addrs: str) -> str:
    """'a;b' for a shell (a bare ; would end the command)."""
    return f"'{addrs}'" if ";" in addrs else addrs


def _blank(v) -> str:
    return "" if v is None else str(v)


@cluster.command("down")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_down(directory, as_json):
    """Stop every process of the cluster: those whose recorded pid still runs the command
    `up` started (a reused pid is left alone)."""
    from ..localcluster.cluster import NoCluster, down
    try:
        state = down(directory)
    except NoCluster as e:
        raise click.ClickException(str(e)) from None
    _emit(state, as_json, lambda s: click.echo(
        f"stopped {len(s['stopped'])} of {len(s['processes'])} processes"
        + (f": {' '.join(s['stopped'])}" if s["stopped"] else "")))


def _node_command(name: str, doc: str):
    @cluster.command(name, help=doc)
    @click.argument("node")
    @click.option("--dir", "directory", required=True,
                  type=click.Path(file_okay=False, path_type=Path))
    @click.option("--kill", is_flag=True, help="SIGKILL instead of SIGTERM (a crash).")
    def command(node, directory, kill):
        from ..localcluster import cluster as c
        try:
            if name in ("stop", "restart"):
                stopped = c.stop(directory, node, signal.SIGKILL if kill else signal.SIGTERM)
                click.echo(f"{node} {'stopped' if stopped else 'was not running'}")
            if name in ("start", "restart"):
                p = c.start(directory, node)
                click.echo(f"{node} started, pid {p['pid']}")
        except (c.NoCluster, RuntimeError) as e:
            raise click.ClickException(str(e)) from None
    return command


for _name, _doc in (("start", "Start a stopped (or killed) process of the group."),
                    ("stop", "Stop one process of the group (--kill: as a crash)."),
                    ("restart", "Stop and start one process of the group.")):
    _node_command(_name, _doc)
