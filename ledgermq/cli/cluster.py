"""Local replica groups: ledgermq cluster up|status|down."""
from __future__ import annotations

from pathlib import Path

import click

from . import _emit, main


@main.group()
def cluster() -> None:
    """A name server and a replica group as local processes (127.0.0.1)."""


@cluster.command("up")
@click.option("--mode", type=click.Choice(["dledger", "sync", "async", "checkpoint",
                                           "controller"]),
              default="dledger", show_default=True,
              help="dledger: Raft group (S0); sync / async: a SYNC_ / ASYNC_MASTER and slaves "
              "(S2); checkpoint: consistent checkpoint with a control node (S3); controller: "
              "brokers whose master the controller group elects (S1).")
@click.option("--replicas", default=3, show_default=True)
@click.option("--controllers", default=1, show_default=True,
              help="Controller nodes (controller mode).")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_up(mode, replicas, controllers, directory, as_json):
    """Start the group; prints the name server and each node's name, pid and ports."""
    from ..cluster import up
    if replicas < 1:
        raise click.BadParameter("--replicas must be at least 1")
    if controllers < 1:
        raise click.BadParameter("--controllers must be at least 1")
    try:
        state = up(mode, replicas, directory, controllers=controllers)
    except (RuntimeError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    _emit(state, as_json, lambda s: click.echo(
        f"namesrv {s['namesrv']}\n" + "\n".join(
            f"{p['name']:8} pid={p['pid']} port={p['port']}" +
            (f" replication={p['replPort']}" if "replPort" in p else "")
            for p in s["processes"])))


@cluster.command("status")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_status(directory, as_json):
    """Each process: alive or not, its role, and (DLedger) term and commit."""
    from ..cluster import NoCluster, status
    try:
        state = status(directory)
    except NoCluster as e:
        raise click.ClickException(str(e)) from None
    _emit(state, as_json, lambda s: click.echo("\n".join(
        f"{p['name']:8} pid={p['pid']} {'up' if p['alive'] else 'DOWN'} "
        f"{p.get('role', '')}" + (f" term={p['term']} commit={p['commit']}" if "term" in p
                                  else "")
        for p in s["processes"])))


@cluster.command("down")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_down(directory, as_json):
    """Stop every process of the group (by the pids `up` recorded)."""
    from ..cluster import NoCluster, down
    try:
        state = down(directory)
    except NoCluster as e:
        raise click.ClickException(str(e)) from None
    _emit(state, as_json, lambda s: click.echo(f"stopped {len(s['processes'])} processes"))
