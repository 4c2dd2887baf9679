"""What a replication mode is to the broker, and the simplest one: a standalone broker.

The broker never asks which mode it is in. It asks its mode whether it may take writes
(`refuse_write`), writes through it (`write`), and answers a send with what the mode says
the acknowledgement is worth: the store's result now, or `Later` — a future and how to
turn its value into the result (a flush, a slave, a quorum, the consistent checkpoint).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from ...peer_auth.core import PeerAuth
from ...remoting import RemotingCommand, ResponseCode
from ...replication.checkpoint import Resolution
from ...store import MessageStore, PutResult
from ...wire.batch import EncodedBatch
from .protocol import Metric

if TYPE_CHECKING:
    from ...remoting.transport import Connection, Handler
    from ..config import BrokerConfig


log = logging.getLogger(__name__)


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

    async def master_address(self) -> str | None:
        """The group master's broker address as the name servers know it."""

    def client_connections(self) -> list[Any]:
        """Every client connected now (remoting connections and gRPC channels)."""

    @property
    def client_left_at(self) -> float:
        """When a client last closed its connection (monotonic; -inf: none did): it
        reached this broker then."""


@dataclass(slots=True)
class Later:
    """An acknowledgement that waits: `settle(future.result())` is the send's outcome."""
    future: asyncio.Future[Any]  # its value's type is the mode's: flushed, SyncStatus, ...
    settle: Callable[[Any], "PutResult | Pending"]
    may_pend: bool = False  # (checkpoint mode's may settle as Pending)


@dataclass(slots=True)
class Pending:
    """Stored on the master, not yet safe (S3-3): the producer resolves it later, or, for
    a producer that cannot, the broker does with `resolve()` (DONE, RESEND or UNKNOWN)."""
    result: PutResult
    epoch: int
    msg_id: str
    why: str
    resolve: Callable[[], Awaitable[Resolution]]
    resolution: Resolution = Resolution.UNKNOWN  # what resolve() said, once asked


def not_in_mode(mode: str) -> Callable[[RemotingCommand, Connection], RemotingCommand]:
    """A handler for a request only another mode serves."""
    def refuse(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"this broker is not in {mode} mode")
    return refuse


async def beat_every(period_s: Callable[[], float], beat: Callable[[], Awaitable[None]],
                     peer_away: tuple[type[Exception], ...], what: str) -> None:
    """`beat()` once per `period_s()`, however long the last answer took, until cancelled:
    the heartbeat of a mode whose roles come from a peer (a control node, a controller).
    A failure of `peer_away` kinds (it is down, restarting, answers nonsense) is logged at
    debug and tried again at the next beat; any other, with its traceback."""
    while True:
        started = time.monotonic()
        try:
            await beat()
        except peer_away as e:
            log.debug("%s: %s", what, e)
        except Exception:
            log.exception("%s failed", what)
        await asyncio.sleep(max(0.0, period_s() - (time.monotonic() - started)))


class StandaloneMode:
    """One broker, no replicas: a write is acknowledged once stored, or flushed under
    SYNC_FLUSH. Every other mode builds on these defaults; protocol.py says what each
    member promises."""

    name = "standalone"

    def __init__(self, host: ModeHost):
        self.host = host
        self.store = host.store
        self.config = host.config
        self.auth: PeerAuth = host.peer_auth

    # ---- what the broker asks -------------------------------------------------------
    @property
    def is_writable(self) -> bool:
        return True

    @property
    def is_slave(self) -> bool:
        return False

    @property
    def broker_id(self) -> int | None:
        return self.config.brokerId

    @property
    def state_version(self) -> int:
        return 0  # a standalone broker's role has no generation

    @property
    def ha_port(self) -> int:
        return self.config.ha_port

    def refuse_write(self) -> str | None:
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
        return self.store.append(encoded)

    def metrics(self) -> list[Metric]:
        store = self.store
        return [("ledgermq_broker_writable", "1 when this broker takes writes (master, "
                 "leader).", {}, float(self.is_writable)),
                ("ledgermq_commitlog_max_offset", "End of this broker's commit log (bytes).",
                 {}, store.commitlog.max_offset),
                ("ledgermq_confirm_offset", "Consumers see the log up to here (bytes): what "
                 "replication confirmed.", {}, store.dispatch_bound)]

    def replica_offsets(self) -> dict[str, int]:
        return {}

    def handlers(self) -> dict[int, Handler]:
        return {}

    def runtime_info(self) -> dict[str, str]:
        return {"brokerRole": self.config.brokerRole.value}

    # ---- lifecycle ------------------------------------------------------------------
    async def prepare(self) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
