"""What the modes built on the HA port (S2, S3 and S1) share: at most one HA driver at a
time (a master serving slaves or a slave following a master), appends pushed to slaves,
and a slave's answer turned into the send's status."""
from __future__ import annotations

import asyncio
import json

from ...drivers.ha import HAMasterDriver, HASlaveDriver
from ...replication.ha import HAConfig, SyncStatus
from ...store import MessageStore, PutResult, PutStatus
from ...wire.batch import EncodedBatch
from ..config import BrokerConfig
from .base import Later, ModeHost, StandaloneMode


def ha_config(config: BrokerConfig, store: MessageStore, checkpoint: bool = False) -> HAConfig:
    return HAConfig(segment_size=store.config.mappedFileSizeCommitLog,
                    heartbeat_ms=config.haSendHeartbeatInterval,
                    housekeeping_ms=config.haHousekeepingInterval,
                    sync_timeout_ms=config.checkpointSyncTimeoutMillis if checkpoint
                    else store.config.syncFlushTimeout,
                    fallbehind_max=config.haSlaveFallbehindMax,
                    transfer_batch=config.haTransferBatchSize, checkpoint=checkpoint,
                    member_timeout_ms=config.checkpointMemberTimeout)


class HALinks:
    """The one HA driver a broker runs now, if any."""

    def __init__(self) -> None:
        self.master: HAMasterDriver | None = None
        self.slave: HASlaveDriver | None = None

    async def lead(self, driver: HAMasterDriver) -> None:
        """Serve slaves with `driver`, already started (binding the port may need
        retries, which the caller knows how to make)."""
        await self.stop()
        self.master = driver

    async def follow(self, driver: HASlaveDriver) -> None:
        await self.stop()
        await driver.start()
        self.slave = driver

    async def stop(self) -> None:
        for d in (self.master, self.slave):
            if d is not None:
                await d.stop()
        self.master = self.slave = None

    def port(self, configured: int) -> int:
        return self.master.port if self.master is not None else configured

    def runtime_info(self) -> dict[str, str]:
        d = self.master or self.slave
        return {} if d is None else {"ha": json.dumps(d.status())}


def slave_acknowledged(result: PutResult, status: SyncStatus, config: BrokerConfig,
                       sync_timeout_ms: int) -> PutResult:
    """A master's write once its slaves answered (SYNC_MASTER, controller mode): the
    status says which promise the slaves did not keep."""
    if result.status is PutStatus.PUT_OK and status is not SyncStatus.OK:
        if status is SyncStatus.SLAVE_NOT_AVAILABLE:
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
            result.error = "no slave is connected, or it is too far behind"
        elif status is SyncStatus.NOT_ENOUGH_REPLICAS:
            result.status = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
            result.error = (f"stored on the master but not acknowledged: the SyncStateSet "
                            f"has fewer than minInSyncReplicas={config.minInSyncReplicas} "
                            "members")
        else:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.error = (f"no slave acknowledged within syncFlushTimeout="
                            f"{sync_timeout_ms} ms")
    return result


def when_slaves_ack(store: MessageStore, config: BrokerConfig, result: PutResult,
                    synced: "asyncio.Future[SyncStatus]") -> Later:
    """Acknowledged once flushed (under SYNC_FLUSH) and once the slaves answered."""
    def settle(status: SyncStatus) -> PutResult:
        return slave_acknowledged(result, status, config, store.config.syncFlushTimeout)
    wait = store.durable_wait(result)
    if wait is None:
        return Later(synced, settle)
    return Later(asyncio.ensure_future(_flushed_then(store, result, wait, synced)), settle)


async def _flushed_then(store: MessageStore, result: PutResult, wait: asyncio.Future[bool],
                        synced: asyncio.Future[SyncStatus]) -> SyncStatus:
    if not await wait:
        store.mark_flush_timeout(result)
    return await synced


class HAPortMode(StandaloneMode):
    """A mode whose replicas copy the log over the HA port."""

    def __init__(self, host: ModeHost) -> None:
        super().__init__(host)
        self.links = HALinks()

    @property
    def is_slave(self) -> bool:
        return self.links.slave is not None

    @property
    def ha_port(self) -> int:
        return self.links.port(self.config.ha_port)

    def append_and_push(self, encoded: EncodedBatch) -> tuple[PutResult, HAMasterDriver | None]:
        """Append; a master's slaves get the new bytes with this loop iteration's push.
        The driver is returned when there is a write for slaves to acknowledge."""
        result = self.store.append(encoded)
        ha = self.links.master
        if ha is None or not result.ok:
            return result, None
        ha.appended()
        return result, ha

    def write_internal(self, encoded: EncodedBatch) -> PutResult:
        """The broker's own writes (due delayed messages, transaction decisions) go to the
        slaves like a send's: appended alone, they would wait for the next client write."""
        return self.append_and_push(encoded)[0]

    def not_master(self, role: str) -> str:
        return (f"broker {self.host.address} is not the master of {self.config.brokerName} "
                f"now ({role}): not writable")

    def runtime_info(self) -> dict[str, str]:
        return {**super().runtime_info(), **self.links.runtime_info()}

    def replica_offsets(self) -> dict[str, int]:
        """Each connected slave that reported: by its id, or (classic HA, whose slaves
        send none) by its address."""
        ha = self.links.master
        if ha is None:
            return {}
        out: dict[str, int] = {}
        for link, ln in list(ha.core.links.items()):
            if ln.acked < 0:
                continue
            if ln.slave_id is not None:
                out[str(ln.slave_id)] = ln.acked
            elif (w := ha.writers.get(link)) is not None:
                peer = w.get_extra_info("peername")
                out[f"{peer[0]}:{peer[1]}" if peer else f"link-{link}"] = ln.acked
        return out

    async def stop(self) -> None:
        await self.links.stop()
