"""TLS settings under RocketMQ's names (its TlsSystemConfig keys) and the SSL contexts
made from them.

Server side: `tls.server.mode` is disabled (plaintext only, ledgermq's default),
permissive (plaintext and TLS on one port) or enforcing (TLS only). Client side (a
server's own links to name servers, controllers, peers and masters, as RocketMQ's
`tls.enable`): `tls.enable=true` and the `tls.client.*` keys. The keys sit in a server's
config file or in the properties file `tls.config.file` names. Every file is read and
every context built when the settings are loaded, so a bad path, a key that does not
match its certificate or an unknown mode stops the server at startup, naming the key.
"""
from __future__ import annotations

import enum
import ssl
from dataclasses import dataclass
from pathlib import Path

from ..runtime.config import ConfigError, read_properties

TLS_RECORD_HANDSHAKE = 0x16  # the first byte a TLS client sends (a ClientHello record)


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
               "require": ssl.CERT_REQUIRED}

KEYS = ("tls.server.mode", "tls.server.certPath", "tls.server.keyPath",
        "tls.server.keyPassword", "tls.server.need.client.auth", "tls.server.trustCertPath",
        "tls.enable", "tls.client.certPath", "tls.client.keyPath",
        "tls.client.keyPassword", "tls.client.trustCertPath", "tls.client.authServer",
        "tls.config.file")


@dataclass(frozen=True)
class Tls:
    """A process's TLS: how its servers listen (mode, server context) and whether its
    own connections to other servers use TLS (client context, None: plaintext)."""
    mode: TlsMode = TlsMode.DISABLED
    server: ssl.SSLContext | None = None
    client: ssl.SSLContext | None = None
    # the server side's files, for what takes PEM rather than a context (gRPC)
    server_files: "ServerFiles | None" = None

    @property
    def serves_tls(self) -> bool:
        return self.mode is not TlsMode.DISABLED


@dataclass(frozen=True)
class ServerFiles:
    cert: Path
    key: Path
    key_password: str | None
    client_auth: str  # none | optional | require
    trust: Path | None


DISABLED = Tls()


def split_tls_keys(values: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the tls.* keys, every other key) of a config file's values."""
    tls = {k: v for k, v in values.items() if k.startswith("tls.")}
    return tls, {k: v for k, v in values.items() if not k.startswith("tls.")}


def split_tls(values: dict[str, str], config_file: str | Path | None = None
              ) -> tuple[Tls, dict[str, str]]:
    """(the Tls of a config file's tls.* keys, its other keys); relative paths are read
    from the config file's folder."""
    tls_values, rest = split_tls_keys(values)
    return load_tls(tls_values, Path(config_file).parent if config_file else None), rest


def needs_tls_links(tls: Tls, what: str) -> None:
    """ConfigError when a server whose peers dial its own kind of port enforces TLS there
    but would dial them in plaintext: the group could never form."""
    if tls.mode is TlsMode.ENFORCING and tls.client is None:
        raise ConfigError(f"tls.server.mode=enforcing with {what} needs tls.enable=true "
                          "(with tls.client.trustCertPath): its peers' ports enforce TLS too")


def load_tls(values: dict[str, str], base: Path | None = None) -> Tls:
    """The Tls of a config file's tls.* keys (others are ignored); relative paths are
    read from `base` (the config file's folder). ConfigError names the bad key."""
    values = {k: v for k, v in values.items() if k.startswith("tls.")}
    if values.get("tls.config.file"):
        path = _path(values, "tls.config.file", base)
        from_file = read_properties(path)
        base = path.parent
        # keys in the server's own config win over the shared file's
        values = {**from_file, **{k: v for k, v in values.items() if k != "tls.config.file"}}
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise ConfigError(f"unknown TLS keys: {', '.join(unknown)} (known: {', '.join(KEYS)})")
    raw_mode = values.get("tls.server.mode", "disabled").strip().lower()
    try:
        mode = TlsMode(raw_mode)
    except ValueError:
        raise ConfigError(f"tls.server.mode={raw_mode!r} is not one of disabled, permissive, "
                          "enforcing") from None
    server = _server_context(values, base) if mode is not TlsMode.DISABLED else None
    client = _client_context(values, base) if _bool(values, "tls.enable", False) else None
    files = None
    if server is not None:  # checked by _server_context already
        cert = _path(values, "tls.server.certPath", base)
        key = _path(values, "tls.server.keyPath", base) if values.get("tls.server.keyPath") \
            else cert
        auth = values.get("tls.server.need.client.auth", "none").strip().lower()
        trust = _path(values, "tls.server.trustCertPath", base) if auth != "none" else None
        files = ServerFiles(cert, key, values.get("tls.server.keyPassword") or None, auth,
                            trust)
    return Tls(mode, server, client, files)


def _bool(values: dict[str, str], key: str, default: bool) -> bool:
    raw = values.get(key, "").strip().lower()
    if not raw:
        return default
    if raw not in ("true", "false"):
        raise ConfigError(f"{key}={raw!r} is not a valid bool (true or false)")
    return raw == "true"


def _path(values: dict[str, str], key: str, base: Path | None) -> Path:
    path = Path(values[key]).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    if not path.is_file():
        raise ConfigError(f"{key}={values[key]!r}: no such file ({path})")
    return path


def _load_chain(ctx: ssl.SSLContext, values: dict[str, str], side: str,
                base: Path | None) -> None:
    cert_key, key_key = f"tls.{side}.certPath", f"tls.{side}.keyPath"
    cert = _path(values, cert_key, base)
    key = _path(values, key_key, base) if values.get(key_key) else cert
    password = values.get(f"tls.{side}.keyPassword") or None
    try:
        ctx.load_cert_chain(cert, key, password)
    except ssl.SSLError as e:
        if "MISMATCH" in str(e):
            why = "the key does not match the certificate"
        elif password:
            why = f"wrong tls.{side}.keyPassword, or not a PEM key ({e.reason or e})"
        else:
            why = f"not a PEM certificate and key ({e.reason or e})"
        raise ConfigError(f"{key_key}={values.get(key_key, '')!r} with {cert_key}="
                          f"{values[cert_key]!r}: {why}") from None
    except (OSError, ValueError) as e:  # a wrong keyPassword, an unreadable file
        raise ConfigError(f"tls.{side}.keyPassword / {key_key}: cannot load the key: "
                          f"{e}") from None


def _load_trust(ctx: ssl.SSLContext, values: dict[str, str], key: str,
                base: Path | None) -> None:
    path = _path(values, key, base)
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError as e:
        raise ConfigError(f"{key}={values[key]!r}: not PEM certificates ({e.reason or e})"
                          ) from None


def _server_context(values: dict[str, str], base: Path | None) -> ssl.SSLContext:
    if not values.get("tls.server.certPath"):
        raise ConfigError(f"tls.server.mode={values['tls.server.mode']} needs "
                          "tls.server.certPath and tls.server.keyPath (PEM files)")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load_chain(ctx, values, "server", base)
    auth = values.get("tls.server.need.client.auth", "none").strip().lower()
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"tls.server.need.client.auth={auth!r} is not one of none, "
                          "optional, require")
    if auth != "none":
        if not values.get("tls.server.trustCertPath"):
            raise ConfigError(f"tls.server.need.client.auth={auth} needs "
                              "tls.server.trustCertPath (the CA that signs client certificates)")
        _load_trust(ctx, values, "tls.server.trustCertPath", base)
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx


def _client_context(values: dict[str, str], base: Path | None) -> ssl.SSLContext:
    # ledgermq verifies the server by default (RocketMQ's tls.client.authServer is false)
    verify = _bool(values, "tls.client.authServer", True)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if values.get("tls.client.trustCertPath"):
        _load_trust(ctx, values, "tls.client.trustCertPath", base)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if values.get("tls.client.certPath"):
        _load_chain(ctx, values, "client", base)
    return ctx


def client_context(ca_file: str | Path | None = None, *, verify: bool = True,
                   cert: str | Path | None = None, key: str | Path | None = None
                   ) -> ssl.SSLContext:
    """A client's context: trusting `ca_file` (else the system's CAs), with an optional
    client certificate; the client library's `tls=` and the CLI's `--tls` use it."""
    values = {"tls.client.authServer": str(verify).lower()}
    for k, v in (("tls.client.trustCertPath", ca_file), ("tls.client.certPath", cert),
                 ("tls.client.keyPath", key)):
        if v:
            values[k] = str(v)
    return _client_context(values, None)
