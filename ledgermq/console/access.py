"""Who may use the console, and that a change comes from its own pages.

- Login (optional; required off loopback): HTTP Basic with `--console-user` and the
  password in `--console-password-file`, compared in constant time.
- Every state-changing request (POST) must come from the console's own pages: an Origin
  header, when the browser sends one, names this console, and the form carries the
  console's CSRF token (random per console process, in every page's forms). A page on
  another site can make a browser post to the console but can read neither.
"""
from __future__ import annotations

import base64
import hmac
import ipaddress
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from ..runtime.config import ConfigError

CSRF_FIELD = "_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_login(host: str, user: str | None, password_file: str | None
               ) -> tuple[str, str] | None:
    """(user, password), None (no login: on loopback only), or ConfigError saying what
    is missing or wrong."""
    if bool(user) != bool(password_file):
        raise ConfigError("--console-user and --console-password-file go together")
    if not user:
        if not is_loopback(host):
            raise ConfigError(f"the console binds {host}, beyond this machine: give it a "
                              "login (--console-user, --console-password-file)")
        return None
    try:
        password = Path(password_file).read_text().strip()
    except OSError as e:
        raise ConfigError(f"--console-password-file {password_file}: {e.strerror or e}") \
            from None
    if len(password) < 8:
        raise ConfigError(f"--console-password-file {password_file}: the password has "
                          f"{len(password)} characters, use at least 8")
    return user, password


class Access:
    def __init__(self, login: tuple[str, str] | None = None):
        self.login = login
        self.csrf = secrets.token_urlsafe(32)

    def _logged_in(self, request: web.Request) -> bool:
        if self.login is None:
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(given, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        ok_user = hmac.compare_digest(user.encode(), self.login[0].encode())
        return hmac.compare_digest(password.encode(), self.login[1].encode()) and ok_user

    @staticmethod
    def _foreign_origin(request: web.Request) -> str | None:
        """The other site a browser says this request comes from, or None."""
        origin = request.headers.get("Origin") or request.headers.get("Referer")
        if not origin or origin == "null":
            return origin or None
        parts = urlsplit(origin)
        return None if parts.netloc == request.host else f"{parts.scheme}://{parts.netloc}"

    @web.middleware
    async def guard(self, request: web.Request, handler):
        if not self._logged_in(request):
            raise web.HTTPUnauthorized(text="log in to the ledgermq console",
                                       headers={"WWW-Authenticate":
                                                'Basic realm="ledgermq console"'})
        if request.method not in SAFE_METHODS:
            foreign = self._foreign_origin(request)
            if foreign is not None:
                raise web.HTTPForbidden(text=f"a change from another site ({foreign}) is "
                                             "refused: use the console's own pages")
            form = await request.post()
            given = str(form.get(CSRF_FIELD, ""))
            if not hmac.compare_digest(given.encode(), self.csrf.encode()):
                raise web.HTTPForbidden(text="the form's CSRF token is missing or wrong: "
                                             "reload the page and submit it again")
        return await handler(request)
