"""The broker's configuration as RocketMQ's admin tool reads and changes it (mqadmin
getBrokerConfig / updateBrokerConfig): GET_BROKER_CONFIG answers every key of broker.conf
(BrokerConfig's and StoreConfig's) as properties text, secrets left out; UPDATE_BROKER_CONFIG
changes the keys the broker reads at each use (LIVE_KEYS), at once and until it restarts
(broker.conf is not rewritten). A change naming any other key is refused whole, naming it:
those are read when the broker starts."""
from __future__ import annotations

import dataclasses
import enum
import logging
from typing import TYPE_CHECKING, Any, Callable, cast, get_type_hints

from ...remoting import Connection, RemotingCommand, ResponseCode
from ...remoting.codes import RequestCode
from ...remoting.transport import Handler
from ...runtime.config import ConfigError, convert, parse_properties

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

# read where they are used (the store's append, retention, the transaction checker, a
# held pull), so a new value takes effect with the next use
LIVE_KEYS = frozenset({"maxMessageSize", "diskMaxUsedSpaceRatio", "fileReservedTime",
                       "transactionTimeOut", "transactionCheckMax", "longPollingEnable",
                       "preferredLeaderId"})  # (the DLedger leader reads it every tick)
# what a live key's value must agree with besides its own check: why not, or None
LIVE_CHECKS: dict[str, Callable[[Any, Any], str | None]] = {
    "preferredLeaderId": lambda config, value: config.preferred_leader_problem(value)}
MAX_BODY = 64 << 10  # an update names a few keys


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return value.name
    return str(value)


def properties_text(*configs: Any) -> str:
    """key=value lines of every field of `configs`, but the secrets (repr=False fields)."""
    lines = [f"{f.name}={_text(getattr(c, f.name))}" for c in configs
             for f in dataclasses.fields(c) if f.repr]
    return "".join(line.replace("\n", " ") + "\n" for line in sorted(lines))


def apply(changes: dict[str, str], *configs: Any) -> str | None:
    """Set each changed key on the config that holds it, all or none: why not, or None."""
    owners = {f.name: c for c in configs for f in dataclasses.fields(c)}
    unknown = sorted(k for k in changes if k not in owners)
    if unknown:
        return f"unknown config keys: {', '.join(unknown)}"
    fixed = sorted(k for k in changes if k not in LIVE_KEYS)
    if fixed:
        return (f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} read when the broker "
                f"starts: set {'it' if len(fixed) == 1 else 'them'} in broker.conf and restart "
                f"(changeable while running: {', '.join(sorted(LIVE_KEYS))})")
    values = {}
    for key, raw in changes.items():
        owner = owners[key]
        try:
            values[key] = convert(key, raw, get_type_hints(type(owner))[key])
        except ConfigError as e:
            return str(e)
        field = next(f for f in dataclasses.fields(owner) if f.name == key)
        problem = field.metadata.get("check", lambda v: None)(values[key]) or \
            LIVE_CHECKS.get(key, lambda c, v: None)(owner, values[key])
        if problem:
            return f"{key}={raw!r}: {problem}"
    for key, value in values.items():
        setattr(owners[key], key, value)
    return None


class BrokerConfigProcessor:
    def __init__(self, broker: Broker):
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_BROKER_CONFIG: self.get,
                RequestCode.UPDATE_BROKER_CONFIG: self.update}

    def get(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        text = properties_text(self.broker.config, self.broker.store.config)
        return cmd.response(ResponseCode.SUCCESS, None, None, text.encode())

    def update(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = bytes(cast(bytes, cmd.body or b""))
        if len(body) > MAX_BODY:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"a config update of {len(body)} bytes: at most {MAX_BODY}")
        try:
            changes = parse_properties(body.decode("utf-8", "replace"), "the config update")
        except ConfigError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"config not changed: {e}")
        if not changes:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no key=value in the update")
        why = apply(changes, self.broker.config, self.broker.store.config)
        if why:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"config not changed: {why}")
        log.warning("config changed while running, until restart, by %s: %s", conn.peer,
                    ", ".join(f"{k}={v}" for k, v in sorted(changes.items())))
        return cmd.response(ResponseCode.SUCCESS)
