"""Controller mode (S1) on a broker: the ReplicasManager.

It registers the broker with the controller (which gives it a broker id), heartbeats,
and turns the group's view (master, MasterEpoch, SyncStateSet) into a role: master (an
AutoSwitchMaster on the HA port, a new epoch in the EpochFile), slave (an AutoSwitchSlave
following the master's HA address) or none yet (not writable, not registered with the
name server). A group without a master asks the controller to elect one. The master's
SyncStateSet changes go to the controller as AlterSyncStateSet requests.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..controller.client import ControllerClient, ControllerError
from ..controller.metadata import STALE_SET_EPOCH
from ..remoting import RemotingError, RequestCode
from ..replication.autoswitch.sync_state import ProposeSyncStateSet, SyncConfig, SyncStateTracker
from .autoswitch import AutoSwitchMasterDriver, AutoSwitchSlaveDriver, load_epochs
from .ha import now_ms

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

BIND_RETRY_S = 0.2


class ReplicasManager:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.store = broker.store
        c = broker.config
        self.group = c.brokerName
        self.controller = ControllerClient(c.controllerAddr)
        self.epochs = load_epochs(self.store)
        self.broker_id: int | None = None
        self.role = "NONE"  # MASTER | SLAVE | NONE
        self.master_epoch = -1  # the epoch of the master we lead or follow
        self.view: dict = {}
        self._task: asyncio.Task | None = None
        self._altering: set[asyncio.Task] = set()

    @property
    def is_master(self) -> bool:
        return self.role == "MASTER"

    async def start(self) -> None:
        try:
            await self.step()  # a role before the broker announces itself, if we can
        except (ControllerError, RemotingError) as e:
            log.warning("controller %s: %s (retrying)", self.broker.config.controllerAddr, e)
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._altering] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.broker._stop_ha()
        await self.controller.close()

    async def _loop(self) -> None:
        interval = self.broker.config.brokerHeartbeatInterval / 1000
        while True:
            started = time.monotonic()
            try:
                await self.step()
            except (ControllerError, RemotingError) as e:
                log.debug("controller: %s", e)
            except Exception:
                log.exception("controller-mode step failed")
            # one heartbeat per interval, however long the last answer took
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    # ---- talking to the controller ----------------------------------------------------
    async def step(self) -> None:
        c = self.broker.config
        if self.broker_id is None:
            view = await self.controller.call(RequestCode.CONTROLLER_REGISTER_BROKER, {
                "clusterName": c.brokerClusterName, "brokerName": self.group,
                "brokerAddress": self.broker.address, "haAddress": self._ha_addr()})
            self.broker_id = view["brokerId"]
            log.info("controller: registered as broker %d of %s", self.broker_id, self.group)
        view = await self.controller.call(RequestCode.BROKER_HEARTBEAT, {
            "brokerName": self.group, "brokerId": self.broker_id})
        if str(self.broker_id) not in view["brokers"]:
            # cleaned from the controller's metadata: register again, and take the group's
            # epochs as they come from now on
            self.broker_id, self.master_epoch = None, -1
            return
        if view["masterBrokerId"] is None:
            view = await self.controller.call(RequestCode.CONTROLLER_ELECT_MASTER,
                                              {"brokerName": self.group})
        await self.apply(view)

    def _ha_addr(self) -> str:
        return f"{self.broker.config.brokerIP1}:{self.broker.config.ha_port}"

    # ---- roles ------------------------------------------------------------------------
    async def apply(self, view: dict) -> None:
        master, epoch = view["masterBrokerId"], view["masterEpoch"]
        if master is None or epoch < self.master_epoch:
            return  # an older view (a deposed controller leader answering late): ignore it
        self.view = view
        if master == self.broker_id:
            if not self.is_master or self.master_epoch != epoch:
                await self._become_master(view)
            else:
                self._adopt_set(view)
        elif self.role != "SLAVE" or self.master_epoch != epoch:
            await self._become_slave(view)

    async def _become_master(self, view: dict) -> None:
        b = self.broker
        await b._stop_ha()
        epoch = view["masterEpoch"]
        end = self.store.commitlog.max_offset
        if epoch > self.epochs.last_epoch:
            self.epochs.append(epoch, end)
        c = b.config
        tracker = SyncStateTracker(
            self.broker_id, tuple(view["syncStateSet"]), view["syncStateSetEpoch"], end,
            now_ms(), SyncConfig(max_not_catch_up_ms=c.haMaxTimeSlaveNotCatchUp,
                                 all_ack=c.allAckInSyncStateSet,
                                 in_sync_replicas=c.inSyncReplicas,
                                 min_in_sync_replicas=c.minInSyncReplicas))
        driver = AutoSwitchMasterDriver(self.store, b.ha_config(), c.bindAddress, c.ha_port,
                                        self.epochs, tracker, self._propose)
        for _ in range(25):  # our own previous HA server may take a moment to let go
            try:
                await driver.start()
                break
            except OSError as e:
                log.warning("HA port %d busy (%s): retrying", c.ha_port, e)
                await asyncio.sleep(BIND_RETRY_S)
        else:
            raise RemotingError(f"cannot listen on the HA port {c.ha_port}")
        b.ha_master = driver
        self.role, self.master_epoch = "MASTER", epoch
        self.store.set_dispatch_bound(tracker.confirm_offset)
        b.adopt_stored_topics()  # serve every topic the log holds, config copied or not
        log.warning("controller: broker %d is the master of %s in epoch %d (log end %d, "
                    "SyncStateSet %s)", self.broker_id, self.group, epoch, end,
                    view["syncStateSet"])
        await b._reregister()

    async def _become_slave(self, view: dict) -> None:
        b = self.broker
        await b._stop_ha()
        driver = AutoSwitchSlaveDriver(self.store, b.ha_config(), self.epochs,
                                       self._master_ha_addr, slave_id=self.broker_id,
                                       learner=b.config.asyncLearner)
        await driver.start()
        b.ha_slave = driver
        self.role, self.master_epoch = "SLAVE", view["masterEpoch"]
        log.info("controller: broker %d follows master %s (%s) in epoch %d", self.broker_id,
                 view["masterBrokerId"], view["masterHaAddress"], view["masterEpoch"])
        await b._reregister()

    async def _master_ha_addr(self) -> str | None:
        return self.view.get("masterHaAddress")

    def _adopt_set(self, view: dict) -> None:
        """The controller's SyncStateSet is the truth (e.g. a change we asked for and whose
        answer was lost)."""
        ha = self.broker.ha_master
        if isinstance(ha, AutoSwitchMasterDriver):
            ha.core.tracker.controller_view(tuple(view["syncStateSet"]),
                                            view["syncStateSetEpoch"], now_ms())
            ha.set_changed()

    def _propose(self, p: ProposeSyncStateSet) -> None:
        task = asyncio.get_running_loop().create_task(self._alter(p))
        self._altering.add(task)
        task.add_done_callback(self._altering.discard)

    async def _alter(self, p: ProposeSyncStateSet) -> None:
        ha = self.broker.ha_master
        members, epoch, stale = None, p.set_epoch, False
        try:
            view = await self.controller.call(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {"brokerName": self.group, "masterId": self.broker_id,
                 "masterEpoch": self.master_epoch, "syncStateSetEpoch": p.set_epoch},
                body=list(p.members))
            members, epoch = tuple(view["syncStateSet"]), view["syncStateSetEpoch"]
            log.info("controller: SyncStateSet of %s is now %s (epoch %d)", self.group,
                     list(members), epoch)
        except (ControllerError, RemotingError) as e:
            log.warning("controller refused SyncStateSet %s: %s", list(p.members), e)
            stale = STALE_SET_EPOCH in str(e)
        if ha is self.broker.ha_master and isinstance(ha, AutoSwitchMasterDriver):
            ha.core.tracker.applied(members, epoch, now_ms(), stale=stale)
            ha.set_changed()

    def status(self) -> dict:
        return {"brokerId": self.broker_id, "role": self.role, "masterEpoch": self.master_epoch,
                "epochs": self.epochs.entries, "view": self.view}
