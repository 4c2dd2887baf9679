"""Classic master/slave HA (S2): a SYNC_MASTER acknowledges a write once a slave holds
it, an ASYNC_MASTER once it is stored (slaves follow behind); a SLAVE copies its
master's log over the HA port and takes no writes."""
from __future__ import annotations

import asyncio
import logging

from ...drivers.ha import HAMasterDriver, HASlaveDriver
from ...drivers.ha_refill import had_slaves
from ...store import PutResult
from ...wire.batch import EncodedBatch
from ..config import BrokerRole
from .base import Later
from .ha_links import HAPortMode, ha_config, when_slaves_ack

log = logging.getLogger(__name__)


class ClassicHAMode(HAPortMode):
    name = "classic-ha"

    def __init__(self, host):
        super().__init__(host)
        self.role = self.config.brokerRole
        self.recovering = False  # a restarted SYNC_MASTER refilling from its slaves

    @property
    def is_writable(self) -> bool:
        return self.role is not BrokerRole.SLAVE and not self.recovering

    def refuse_write(self) -> str | None:
        if self.role is BrokerRole.SLAVE:
            return f"broker {self.config.brokerName} is a slave: not writable"
        if self.recovering:
            return (f"broker {self.config.brokerName} restarted and is refilling its log from "
                    "its slaves before it takes writes (haMasterRecoveryWaitMillis)")
        return None

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        result, ha = self.append_and_push(encoded)
        if ha is not None and self.role is BrokerRole.SYNC_MASTER:
            return when_slaves_ack(self.store, self.config, result,
                                   ha.sync(result.end_offset))
        return self.after_append(result)

    async def start(self) -> None:
        c = self.config
        if self.role is BrokerRole.SLAVE:
            await self.links.follow(HASlaveDriver(self.store, ha_config(c, self.store),
                                                  self._master_addr, auth=self.auth,
                                                  tls=c.tls))
            return
        # a SYNC_MASTER's slaves may hold acknowledged messages its restart lost
        self.recovering = self.role is BrokerRole.SYNC_MASTER and \
            c.haMasterRecoveryWaitMillis > 0 and had_slaves(self.store)
        ha = HAMasterDriver(self.store, ha_config(c, self.store), c.bindAddress, c.ha_port,
                            auth=self.auth, tls=c.tls, on_recovered=self._recovered,
                            recover_ms=c.haMasterRecoveryWaitMillis if self.recovering
                            else None)
        try:
            await ha.start()
        except OSError as e:
            if self.role is BrokerRole.SYNC_MASTER:
                raise OSError(f"SYNC_MASTER needs its HA port {c.ha_port} "
                              f"(haListenPort): {e}") from None
            # an ASYNC_MASTER without slaves loses nothing by it: say so, keep serving
            log.error("HA port %d unavailable (%s): slaves cannot follow this broker; "
                      "set haListenPort", c.ha_port, e)
            return
        await self.links.lead(ha)
        log.info("HA port %d (%s)", ha.port, self.role.value)

    def _recovered(self) -> None:
        self.recovering = False
        asyncio.get_running_loop().create_task(self.host.role_changed())

    async def _master_addr(self) -> str | None:
        """haMasterAddress, else what the name server says."""
        return self.config.haMasterAddress or await self.host.master_ha_address()
