"""What a replication mode is to the broker, and the simplest one: a standalone broker.

The broker never asks which mode it is in. It asks its mode whether it may take writes
(`refuse_write`), writes through it (`write`), and answers a send with what the mode says
the acknowledgement is worth: the store's result now, or `Later` — a future and how to
turn its value into the result (a flush, a slave, a quorum, the consistent checkpoint).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from ...peer_auth.core import PeerAuth
from ...remoting import RemotingCommand, ResponseCode
from ...store import MessageStore, PutResult
from ...wire.batch import EncodedBatch

if TYPE_CHECKING:
    from ..config import BrokerConfig


class ModeHost(Protocol):
    """What a mode may ask of the broker that runs it."""
    store: MessageStore
    config: "BrokerConfig"
    peer_auth: PeerAuth  # the cluster secret, for the mode's links to its peers

    @property
    def address(self) -> str: ...

    async def role_changed(self) -> None:
        """Serve (or stop serving) as the mode now says: topics, name-server routes."""

    async def master_ha_address(self) -> str | None:
        """The group master's HA address as the name server knows it."""


@dataclass(slots=True)
class Later:
    """An acknowledgement that waits: `settle(future.result())` is the send's outcome."""
    future: asyncio.Future
    settle: Callable[[object], "PutResult | Pending"]


@dataclass(slots=True)
class Pending:
    """Stored on the master, not yet safe (S3-3): the producer resolves it later."""
    result: PutResult
    epoch: int
    msg_id: str
    why: str


def not_in_mode(mode: str):
    """A handler for a request only another mode serves."""
    def refuse(cmd: RemotingCommand, conn) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"this broker is not in {mode} mode")
    return refuse


class StandaloneMode:
    """One broker, no replicas: a write is acknowledged once stored, or flushed under
    SYNC_FLUSH. Every other mode builds on these defaults."""

    name = "standalone"

    def __init__(self, host: ModeHost):
        self.host = host
        self.store = host.store
        self.config = host.config
        self.auth: PeerAuth = host.peer_auth

    # ---- what the broker asks -------------------------------------------------------
    @property
    def is_writable(self) -> bool:
        """Takes writes now: the group's master, whose own services (delayed delivery,
        consumer-offset commits on pulls) may change state."""
        return True

    @property
    def is_slave(self) -> bool:
        """Copies another broker's log (and so its topics and consumer offsets)."""
        return False

    @property
    def broker_id(self) -> int | None:
        """The id the name server routes by (0: the master); None: not routable yet."""
        return self.config.brokerId

    @property
    def state_version(self) -> int:
        """The role's generation, sent to name servers as the registration's stateVersion:
        a registration from an older one (a deposed master that woke up) loses to a newer
        one. 0 where roles have no generation."""
        return 0

    @property
    def ha_port(self) -> int:
        return self.config.ha_port

    def refuse_write(self) -> str | None:
        """Why this broker cannot take a send now, or None."""
        return None

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        return self.after_append(self.store.append(encoded))

    def after_append(self, result: PutResult) -> PutResult | Later:
        wait = self.store.durable_wait(result)
        if wait is None:
            return result
        return Later(wait, lambda flushed: self.flushed(result, flushed))

    def flushed(self, result: PutResult, flushed: bool) -> PutResult:
        if not flushed:
            self.store.mark_flush_timeout(result)
        return result

    def write_internal(self, encoded: EncodedBatch) -> PutResult:
        """The broker's own writes (due delayed messages): no one waits for them."""
        return self.store.append(encoded)

    def metrics(self) -> list[tuple[str, str, dict[str, str], float]]:
        """Replication figures for Prometheus: (name, help, labels, value); a gauge, or a
        counter when the name ends in _total."""
        store = self.store
        return [("ledgermq_broker_writable", "1 when this broker takes writes (master, "
                 "leader).", {}, float(self.is_writable)),
                ("ledgermq_commitlog_max_offset", "End of this broker's commit log (bytes).",
                 {}, store.commitlog.max_offset),
                ("ledgermq_confirm_offset", "Consumers see the log up to here (bytes): what "
                 "replication confirmed.", {}, store.dispatch_bound)]

    def replica_offsets(self) -> dict[str, int]:
        """On a master or leader: each replica (by id or address) and the commit-log offset
        it acknowledged, for its lag in the metrics; empty elsewhere."""
        return {}

    def handlers(self) -> dict:
        """Request handlers only this mode serves."""
        return {}

    def runtime_info(self) -> dict[str, str]:
        return {"brokerRole": self.config.brokerRole.value}

    # ---- lifecycle ------------------------------------------------------------------
    async def prepare(self) -> None:
        """Before the broker listens (its store is open)."""

    async def start(self) -> None:
        """Once the broker listens (its address is known)."""

    async def stop(self) -> None:
        pass
