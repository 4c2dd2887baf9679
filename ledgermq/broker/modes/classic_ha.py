"""Classic master/slave HA (S2): a SYNC_MASTER acknowledges a write once a slave holds
it, an ASYNC_MASTER once it is stored (slaves follow behind); a SLAVE copies its
master's log over the HA port and takes no writes."""
from __future__ import annotations

import asyncio
import logging

from ...drivers.ha import HAMasterDriver, HASlaveDriver
from ...drivers.ha_refill import had_slaves
from ...remoting import RemotingCommand, RequestCode, ResponseCode
from ...remoting.transport import Connection, Handler
from ...store import PutResult
from ...store.commitlog import RecoveryReport
from ...store.config import FlushDiskType
from ...wire.batch import EncodedBatch
from ..config import BrokerRole
from .base import Later, ModeHost
from .ha_links import HAPortMode, ha_config, when_slaves_ack

log = logging.getLogger(__name__)


def restart_may_have_lost(report: RecoveryReport | None, flush: FlushDiskType) -> str | None:
    """Why a restarted master's log may lack messages it acknowledged (its slaves may hold
    them: it refills from them before it takes a write), or None: nothing was lost. A
    clean shutdown flushed everything; a crash of the process alone keeps every written
    byte in the page cache (the same boot); only a cut of damaged or torn bytes, or a
    machine restart under ASYNC_FLUSH, can lose what was acknowledged."""
    if report is None or not report.crashed:
        return None
    if report.truncated_bytes:
        return f"its recovery cut {report.truncated_bytes} bytes ({report.truncated_reason})"
    if report.damaged_from >= 0:
        return f"its recovery found damaged bytes at offset {report.damaged_from}"
    if flush is FlushDiskType.ASYNC_FLUSH and report.same_boot is not True:
        return ("the machine may have restarted since it last ran (ASYNC_FLUSH: writes not "
                "yet fsynced may be lost)")
    return None


def untrusted_tail(report: RecoveryReport | None, flush: FlushDiskType) -> int | None:
    """Where a restarted master's log stops being trustworthy, or None. After a power
    loss under ASYNC_FLUSH, bytes past the last fsync (where the recovery began its
    scan) may be torn in ways no CRC sees: a lost page of a message's properties leaves
    its body CRC whole. A master that refills from its slaves (who hold every
    acknowledged byte) cuts them first: else its torn tail would differ from the slaves'
    copy and they would refuse to refill a log forked from theirs, or drop their copy
    for the torn one."""
    if report is None or not report.crashed or report.same_boot is True or \
            flush is not FlushDiskType.ASYNC_FLUSH:
        return None
    return report.scanned_from if report.end_offset > report.scanned_from else None


class ClassicHAMode(HAPortMode):
    name = "classic-ha"

    def __init__(self, host: ModeHost) -> None:
        super().__init__(host)
        self.role = self.config.brokerRole
        self.recovering = False  # a restarted master refilling from its slaves

    @property
    def is_writable(self) -> bool:
        return self.role is not BrokerRole.SLAVE and not self.recovering

    def refuse_write(self) -> str | None:
        if self.role is BrokerRole.SLAVE:
            return f"broker {self.config.brokerName} is a slave: not writable"
        if self.recovering:
            return (f"broker {self.config.brokerName} restarted and is refilling its log from "
                    "its slaves before it takes writes (haMasterRecoveryWaitMillis); to take "
                    "writes without them, losing what only they hold: ledgermq admin "
                    f"endHaRecovery -b {self.host.address} --cluster-secret-file FILE")
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
        # a master's slaves may hold acknowledged messages its restart lost: a
        # SYNC_MASTER's, and an ASYNC_MASTER's too (it promises nothing when a slave takes
        # over, but writing on over a cut log would fork it from its slaves', and they
        # would drop their copies: the only good ones)
        self.recovering = c.haMasterRecoveryWaitMillis > 0 and had_slaves(self.store) and \
            self._restart_lost()
        if self.recovering:
            self._cut_untrusted_tail()
        ha = HAMasterDriver(self.store, ha_config(c, self.store), c.bindAddress, c.ha_port,
                            auth=self.auth, tls=c.tls, on_recovered=self._recovered,
                            recover_ms=c.haMasterRecoveryWaitMillis if self.recovering
                            else None,
                            # a SYNC_MASTER could not acknowledge without a slave anyway;
                            # an ASYNC_MASTER takes writes once the window has passed
                            wait_for_a_slave=self.role is BrokerRole.SYNC_MASTER)
        try:
            await ha.start()
        except OSError as e:
            if self.role is BrokerRole.SYNC_MASTER:
                raise OSError(f"SYNC_MASTER needs its HA port {c.ha_port} "
                              f"(haListenPort): {e}") from None
            # an ASYNC_MASTER without slaves loses nothing by it: say so, keep serving
            log.error("HA port %d unavailable (%s): slaves cannot follow this broker; "
                      "set haListenPort", c.ha_port, e)
            self.recovering = False  # (no slave can refill it now)
            return
        await self.links.lead(ha)
        log.info("HA port %d (%s)", ha.port, self.role.value)

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.END_HA_RECOVERY: self._end_recovery}

    def _end_recovery(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ha = self.links.master
        if not self.recovering or ha is None:
            return cmd.response(ResponseCode.SUCCESS, "not recovering: nothing to end")
        log.warning("HA: an operator (%s) ends the refill from the slaves: taking writes now; "
                    "acknowledged messages only a slave holds are lost", conn.peer)
        ha.end_recovery()
        return cmd.response(ResponseCode.SUCCESS, "recovery ended: taking writes")

    def _restart_lost(self) -> bool:
        """Whether this master's restart may have lost what it acknowledged, said loudly
        either way."""
        role = self.role.value
        why = restart_may_have_lost(self.store.recovery, self.store.config.flushDiskType)
        if why is None:
            log.warning("%s restarted without losing anything it wrote (%s): it takes "
                        "writes at once, without refilling from its slaves", role,
                        "a crash of the process alone" if self.store.recovery and
                        self.store.recovery.crashed else "a clean shutdown")
            return False
        log.warning("%s restarted and %s: its slaves may hold acknowledged messages it "
                    "lacks; it refills from them before it takes a write", role, why)
        return True

    def _cut_untrusted_tail(self) -> None:
        cut = untrusted_tail(self.store.recovery, self.store.config.flushDiskType)
        if cut is None:
            return
        log.warning("HA: cutting the log from %d (its last fsync) to %d: after a power loss "
                    "those bytes may be torn; the slaves refill what was acknowledged",
                    cut, self.store.commitlog.max_offset)
        self.store.truncate(cut)

    def _recovered(self) -> None:
        self.recovering = False
        asyncio.get_running_loop().create_task(self.host.role_changed())

    async def _master_addr(self) -> str | None:
        """haMasterAddress, else what the name server says."""
        return self.config.haMasterAddress or await self.host.master_ha_address()
