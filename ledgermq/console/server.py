"""The console's HTTP server (aiohttp) on its own event loop: routes, templates, static
assets from the package, and the replica watcher polling in the background."""
from __future__ import annotations

import logging
from pathlib import Path

import jinja2
from aiohttp import web

from ..client.admin import Admin
from . import pages
from .access import Access
from .replicas import ReplicaWatcher
from .views import Rates

log = logging.getLogger(__name__)
HERE = Path(__file__).parent


class Console:
    def __init__(self, namesrv: str, host: str = "127.0.0.1", port: int = 8080, *,
                 poll_s: float = 1.0, login: tuple[str, str] | None = None):
        """`login`: (user, password) it asks for (access.load_login: required off
        loopback)."""
        self.namesrv, self.host, self.port = namesrv, host, port
        self.access = Access(login)
        self.poll_s = poll_s
        self.admin: Admin | None = None
        self.watcher: ReplicaWatcher | None = None
        self.rates = Rates()
        self._runner: web.AppRunner | None = None
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
            undefined=jinja2.StrictUndefined)
        self.templates.filters.update(pages.FILTERS)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.access.guard, pages.errors])
        app["console"] = self
        app.add_routes(pages.routes)
        app.router.add_static("/static", HERE / "static")
        return app

    async def start(self) -> None:
        self.admin = Admin(self.namesrv)
        self.watcher = ReplicaWatcher(self.admin, self.poll_s)
        self.watcher.start()
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self.watcher is not None:
            await self.watcher.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.admin is not None:
            await self.admin.close()
