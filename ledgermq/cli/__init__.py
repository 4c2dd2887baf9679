"""The `ledgermq` command line: the group and the helpers every command uses; the commands
live in the modules beside this one, one concern each."""
from __future__ import annotations

import asyncio
import json
import logging
import sys

import click
from rich.console import Console

from ..config import ConfigError


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail.")
def main(verbose: bool) -> None:
    """ledgermq: a RocketMQ-compatible message broker with a replicated commit log."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _aio(coro):
    from ..client import MQClientError
    from ..remoting import RemotingError
    try:
        return asyncio.run(coro)
    except (MQClientError, RemotingError) as e:
        raise click.ClickException(str(e)) from None


def _emit(data, as_json: bool, render) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=None, default=str))
    else:
        render(data)


def _progress(label: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())


NAMESRV_OPT = click.option("-n", "--namesrv", default="127.0.0.1:9876", show_default=True,
                           help="Name server address(es), ';'-separated.")



def run() -> None:
    from . import admin, clients, cluster, controller_admin, servers, sim  # noqa: F401
    try:
        main()
    except ConfigError as e:
        click.echo(f"config error: {e}", err=True)
        sys.exit(2)
