"""`ledgermq console`: the web console for a cluster, by its name servers."""
from __future__ import annotations

import click

from . import NAMESRV_OPT, main
from .servers import LOGIN_OPTS, _ready


@main.command("console")
@NAMESRV_OPT
@click.option("--port", default=8080, show_default=True, help="HTTP port (0: any free one).")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to serve on; anything but loopback needs a login.")
@LOGIN_OPTS
@click.option("--json", "as_json", is_flag=True)
def console(namesrv: str, port: int, bind: str, console_user: str | None,
            console_password_file: str | None, as_json: bool) -> None:
    """Serve the web console: cluster, topics, consumer groups, message search and the
    live replica-group page, read through the admin API."""
    from ..console import Console
    from ..console.access import load_login
    from ..runtime.foreground import run, serve_until

    login = load_login(bind, console_user, console_password_file)

    async def main_(stop):
        c = Console(namesrv, bind, port, login=login)
        await c.start()
        try:
            _ready({"console": c.url, "namesrv": namesrv}, as_json)
            await serve_until(stop)
        finally:
            await c.stop()

    run(main_)
