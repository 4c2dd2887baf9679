"""Classic master/slave HA (S2): a SYNC_MASTER acknowledges a write once a slave holds
it, an ASYNC_MASTER once it is stored (slaves follow behind); a SLAVE copies its
master's log over the HA port and takes no writes."""
from __future__ import annotations

import logging

from ...drivers.ha import HAMasterDriver, HASlaveDriver
from ...store import PutResult
from ...wire.batch import EncodedBatch
from ..config import BrokerRole
from .base import Later, StandaloneMode
from .ha_links import HALinks, ha_config, when_slaves_ack

log = logging.getLogger(__name__)


class ClassicHAMode(StandaloneMode):
    name = "classic-ha"

    def __init__(self, host):
        super().__init__(host)
        self.role = self.config.brokerRole
        self.links = HALinks()

    @property
    def is_writable(self) -> bool:
        return self.role is not BrokerRole.SLAVE

    @property
    def is_slave(self) -> bool:
        return self.links.slave is not None

    @property
    def ha_port(self) -> int:
        return self.links.port(self.config.ha_port)

    def refuse_write(self) -> str | None:
        if self.role is BrokerRole.SLAVE:
            return f"broker {self.config.brokerName} is a slave: not writable"
        return None

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        result = self.store.append(encoded)
        ha = self.links.master
        if ha is None or not result.ok:
            return self.after_append(result)
        ha.appended()
        if self.role is BrokerRole.SYNC_MASTER:
            return when_slaves_ack(self.store, self.config, result,
                                   ha.sync(result.end_offset))
        return self.after_append(result)

    def runtime_info(self) -> dict[str, str]:
        return {**super().runtime_info(), **self.links.runtime_info()}

    async def start(self) -> None:
        c = self.config
        if self.role is BrokerRole.SLAVE:
            await self.links.follow(HASlaveDriver(self.store, ha_config(c, self.store),
                                                  self._master_addr))
            return
        ha = HAMasterDriver(self.store, ha_config(c, self.store), c.bindAddress, c.ha_port)
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

    async def _master_addr(self) -> str | None:
        """haMasterAddress, else what the name server says."""
        return self.config.haMasterAddress or await self.host.master_ha_address()

    async def stop(self) -> None:
        await self.links.stop()
