"""What every replication mode answers the broker (ARCHITECTURE.md: the broker asks its
mode, never checks which mode it is in). `tests/test_layering.py` checks that each mode
in `modes/` has every member below, with the same parameters."""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...remoting.transport import Handler
    from ...store import PutResult
    from ...wire.batch import EncodedBatch
    from .base import Later

Metric = tuple[str, str, dict[str, str], float]  # name, help, labels, value


class ReplicationMode(Protocol):
    name: str  # for logs and GET_BROKER_RUNTIME_INFO: standalone, classic-ha, ...

    @property
    def is_writable(self) -> bool:
        """Takes writes now: the group's master, whose own services (delayed delivery,
        timers, transaction check-backs, consumer-offset commits on pulls) may change
        state."""

    @property
    def is_slave(self) -> bool:
        """Copies another broker's log, and so copies its topics and consumer offsets
        (SlaveSynchronize) and serves topics its queues hold before their config
        arrives."""

    @property
    def broker_id(self) -> int | None:
        """The id the name server routes by (0: the master); None: not routable yet."""

    @property
    def state_version(self) -> int:
        """The role's generation, sent to name servers as the registration's stateVersion:
        a registration from an older one (a deposed master that woke up) loses to a newer
        one. 0 where roles have no generation."""

    @property
    def ha_port(self) -> int:
        """The port replicas connect to, told to the name server (0: none)."""

    def refuse_write(self) -> str | None:
        """Why this broker cannot take a send now (answered SERVICE_NOT_AVAILABLE), or
        None."""

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        """Append a client's batch and say what its acknowledgement is worth: the store's
        result now, or `Later` (a flush, a slave, a quorum, the consistent checkpoint)."""

    def write_internal(self, encoded: EncodedBatch) -> PutResult:
        """The broker's own writes (due delayed messages, timers, transaction decisions):
        appended on the master, no one waits for their replication."""

    def metrics(self) -> list[Metric]:
        """Replication figures for Prometheus; a gauge, or a counter when the name ends in
        _total."""

    def replica_offsets(self) -> dict[str, int]:
        """On a master or leader: each replica (by id or address) and the commit-log
        offset it acknowledged, for its lag in the metrics; empty elsewhere."""

    def handlers(self) -> dict[int, Handler]:
        """Request handlers only this mode serves (request code -> handler)."""

    def runtime_info(self) -> dict[str, str]:
        """The mode's part of GET_BROKER_RUNTIME_INFO."""

    async def prepare(self) -> None:
        """Before the broker listens; its store is open."""

    async def start(self) -> None:
        """Once the broker listens (its address is known)."""

    async def stop(self) -> None:
        """At shutdown: links closed, tasks cancelled, nothing left running."""
