"""The `ledgermq` command line: the group and the helpers every command uses; the commands
live in the modules beside this one, one concern each."""
from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import sys

import click
from rich.console import Console

from .. import __version__
from ..runtime.config import ConfigError
from ..runtime.files import DirectoryInUse


@click.group()
@click.version_option(__version__, prog_name="ledgermq")
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail.")
@click.option("--tls", is_flag=True, help="Client commands connect with TLS (as "
              "LEDGERMQ_TLS=true): to servers with tls.server.mode enforcing or permissive.")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The CA certificate (PEM) that signed the servers' certificates (as "
              "LEDGERMQ_TLS_CA; default: the system's CAs). Implies --tls.")
def main(verbose: bool, tls: bool, tls_ca: str | None) -> None:
    """ledgermq: a RocketMQ-compatible message broker with a replicated commit log."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if tls or tls_ca:  # every client this process makes reads these (client.instance)
        os.environ["LEDGERMQ_TLS"] = "true"
    if tls_ca:
        os.environ["LEDGERMQ_TLS_CA"] = os.path.abspath(tls_ca)


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


def _progress(label: str, enabled: bool = True):
    """A progress bar with rate and ETA on a terminal (stderr); nothing otherwise."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, \
        TextColumn, TimeElapsedColumn, TimeRemainingColumn

    class Rate(ProgressColumn):
        def render(self, task):
            return f"{task.speed or 0:,.0f} msgs/s"
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), Rate(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                    transient=True, disable=not (enabled and sys.stderr.isatty()))


NAMESRV_OPT = click.option("-n", "--namesrv", default="127.0.0.1:9876", show_default=True,
                           help="Name server address(es), ';'-separated.")



def run() -> None:
    from . import (  # noqa: F401
        admin, admin_groups, chaos, clients, cluster, console, controller_admin, servers, sim)
    try:
        main()
    except ConfigError as e:
        click.echo(f"config error: {e}", err=True)
        sys.exit(2)
    except DirectoryInUse as e:
        _fail(f"{e}: stop that process first, or give this one another data directory")
    except OSError as e:  # a server that cannot start: one line, not a traceback
        _fail(_os_error(e))


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _os_error(e: OSError) -> str:
    if e.errno == errno.EADDRINUSE:
        return (f"{e.strerror or e}: another server (another ledgermq?) is listening there; "
                "stop it or choose other ports (--port, --namesrv-port, listenPort)")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {e.filename or ''}: {e.strerror}; choose a directory you can write"
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}"
