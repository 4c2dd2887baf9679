"""Controller mode (S1), RocketMQ 5's automatic master switch (its ReplicasManager).

The broker registers with the controller (which gives it a broker id), heartbeats,
and turns the group's view (master, MasterEpoch, SyncStateSet) into a role: master (an
AutoSwitchMaster on the HA port, a new epoch in the EpochFile), slave (an AutoSwitchSlave
following the master's HA address) or none yet (not writable, not registered with the
name server). A group without a master asks the controller to elect one. The master's
SyncStateSet changes go to the controller as AlterSyncStateSet requests. A master
acknowledges a write once the SyncStateSet holds it, as inSyncReplicas and
allAckInSyncStateSet say; consumers see only what the set confirmed.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Coroutine, cast

from ...controller.client import ControllerClient, ControllerError, ControllerRefused
from ...controller.metadata import refusal_may_have_applied
from ...drivers.autoswitch import AutoSwitchMasterDriver, AutoSwitchSlaveDriver, load_epochs
from ...remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ...remoting.transport import Connection, Handler
from ...replication.autoswitch.sync_state import ProposeSyncStateSet, SyncConfig, SyncStateTracker
from ...replication.autoswitch.transfer import AutoSwitchMaster
from ...runtime.clock import mono_ms
from ...store import PutResult
from ...store.marks.epoch_file import EpochFile
from ...wire.batch import EncodedBatch
from ..config import BrokerConfig
from .base import Later, ModeHost, beat_every
from .client_handover import ClientHandOver, GroupRole
from .disk_handover import FullDiskHandOver
from .ha_links import HAPortMode, ha_config, when_slaves_ack
from .protocol import Metric

log = logging.getLogger(__name__)

BIND_RETRY_S = 0.2


def unsafe_settings(c: BrokerConfig) -> list[str]:
    """What in this broker's configuration gives up "no acknowledged message is lost when
    a broker dies", each with its consequence (empty: the promise holds)."""
    out = []
    if not c.allAckInSyncStateSet:
        n = c.inSyncReplicas
        out.append(f"allAckInSyncStateSet=false, inSyncReplicas={n}: a send is acknowledged "
                   f"once {'the master alone holds it' if n <= 1 else f'{n} members hold it'}"
                   ", and a failover to a member without it loses it")
    if c.syncFromLastFile:
        out.append("syncFromLastFile=true: a new slave copies only the master's last file, "
                   "so if it is elected master the messages before that file are gone")
    return out


class ControllerMode(HAPortMode):
    name = "controller"

    def __init__(self, host: ModeHost) -> None:
        super().__init__(host)
        c = self.config
        self.group = c.brokerName
        self.controller = ControllerClient(c.controllerAddr, auth=self.auth,
                                           ssl_context=c.tls.client)
        self.epochs: EpochFile | None = None  # read in prepare(), once the store is recovered
        self.controller_id: int | None = None  # given by the controller
        self.role = "NONE"  # MASTER | SLAVE | NONE
        self.master_epoch = -1  # the epoch of the master we lead or follow
        self.view: dict[str, Any] = {}  # the controller's JSON
        self.seen_epoch = -1  # the newest master epoch heard of (for the metrics)
        self.master_switches = 0  # new masters seen after the first
        self.became_master = 0
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()  # to the controller, in flight
        self.hand_over = ClientHandOver(host, self.name, self._group_role, self._hand_to)
        self.full_disk = FullDiskHandOver(host, self.name, self._group_role, self._hand_to,
                                          self.replica_offsets)

    @property
    def is_master(self) -> bool:
        return self.role == "MASTER"

    # ---- what the broker asks -------------------------------------------------------
    @property
    def is_writable(self) -> bool:
        return self.is_master and self.links.master is not None

    @property
    def is_slave(self) -> bool:
        return not self.is_master

    @property
    def broker_id(self) -> int | None:
        """The master is 0, a slave its controller-given id; None without a role."""
        if self.is_master:
            return 0
        return self.controller_id if self.role == "SLAVE" else None

    @property
    def state_version(self) -> int:
        """The master epoch this broker leads or follows (RocketMQ's stateVersion)."""
        return max(self.master_epoch, 0)

    def refuse_write(self) -> str | None:
        return None if self.is_writable else self.not_master(self.role)

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        result, ha = self.append_and_push(encoded)
        if ha is None:
            return self.after_append(result)
        return when_slaves_ack(self.store, self.config, result, ha.sync(result.end_offset))

    def handlers(self) -> dict[int, Handler]:
        # (looked up at each request: tests list a mode's codes on an instance not set up)
        return {RequestCode.GET_BROKER_EPOCH_CACHE: self._epoch_cache,
                RequestCode.REPORT_MASTER_UNREACHABLE:
                lambda cmd, conn: self.hand_over.client_report(cmd, conn),
                RequestCode.CLIENTS_CANNOT_REACH_LEADER:
                lambda cmd, conn: self.hand_over.follower_report(cmd, conn)}

    def _epoch_cache(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        assert self.epochs is not None  # read in prepare(), before the broker serves
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps({
            "brokerName": self.group, "brokerId": self.controller_id, "role": self.role,
            "masterEpoch": self.master_epoch, "maxOffset": self.store.commitlog.max_offset,
            "confirmOffset": self.store.dispatch_bound,
            "epochs": [{"epoch": e, "startOffset": s} for e, s in self.epochs.entries],
            # (RocketMQ's EpochEntryCache, for its tools: each epoch ends where the next starts)
            "clusterName": self.config.brokerClusterName, "epochList": [
                {"epoch": e, "startOffset": s, "endOffset": end} for (e, s), end in zip(
                    self.epochs.entries, [s for _, s in self.epochs.entries[1:]]
                    + [self.store.commitlog.max_offset])]},
            separators=(",", ":")).encode())

    def metrics(self) -> list[Metric]:
        return super().metrics() + [
            ("ledgermq_master_epoch", "The epoch of the master this broker leads or follows.",
             {}, self.master_epoch),
            ("ledgermq_sync_state_set_size", "Brokers in the group's SyncStateSet, as this "
             "broker last heard it.", {}, len(self.view.get("syncStateSet") or ())),
            ("ledgermq_controller_role", "1 for this broker's role.", {"role": self.role}, 1),
            ("ledgermq_master_switches_total", "New masters of the group (new master epochs) "
             "this broker heard of after the first.", {}, self.master_switches),
            ("ledgermq_became_master_total", "Times this broker became the group's master.",
             {}, self.became_master), *self.hand_over.metrics(),
            *self.full_disk.metrics()]

    def replica_offsets(self) -> dict[str, int]:
        """Each slave heard from under this master (by broker id), connected or not."""
        ha = self.links.master
        if not isinstance(ha, AutoSwitchMasterDriver):
            return {}
        core = cast(AutoSwitchMaster, ha.core)  # what an AutoSwitchMasterDriver runs
        return {str(b): off for b, off in core.tracker.acks.items()}

    def runtime_info(self) -> dict[str, str]:
        assert self.epochs is not None
        st = {"brokerId": self.controller_id, "role": self.role,
              "masterEpoch": self.master_epoch, "epochs": self.epochs.entries,
              "view": self.view}
        return {**super().runtime_info(), "brokerRole": self.role,
                "brokerId": str(self.controller_id), "controller": json.dumps(st)}

    # ---- lifecycle ------------------------------------------------------------------
    async def prepare(self) -> None:
        self.epochs = load_epochs(self.store)

    async def start(self) -> None:
        for text in unsafe_settings(self.config):
            log.warning("UNSAFE CONFIGURATION, this broker gives up the promise that no "
                        "acknowledged message is lost when a broker dies: %s", text)
        try:
            await self.step()  # a role before the broker announces itself, if we can
        except (ControllerError, RemotingError) as e:
            log.warning("controller %s: %s (retrying)", self.config.controllerAddr, e)
        self._task = asyncio.create_task(self._loop())
        self.full_disk.start()

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._requests] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.hand_over.stop()
        await self.full_disk.stop()
        await super().stop()
        await self.controller.close()

    async def _loop(self) -> None:
        interval = self.config.brokerHeartbeatInterval / 1000
        await beat_every(lambda: interval, self.step, (ControllerError, RemotingError),
                         "controller-mode step")

    # ---- talking to the controller ----------------------------------------------------
    async def step(self) -> None:
        c = self.config
        assert self.epochs is not None
        if self.controller_id is None:
            view = await self.controller.call(RequestCode.CONTROLLER_REGISTER_BROKER, {
                "clusterName": c.brokerClusterName, "brokerName": self.group,
                "brokerAddress": self.host.address, "haAddress": self._ha_addr()})
            self.controller_id = view["brokerId"]
            log.info("controller: registered as broker %d of %s", self.controller_id, self.group)
        view = await self.controller.call(RequestCode.BROKER_HEARTBEAT, {
            "brokerName": self.group, "brokerId": self.controller_id,
            # what the controller elects by (the most up-to-date member first)
            "epoch": self.epochs.last_epoch, "maxOffset": self.store.commitlog.max_offset,
            "confirmOffset": self.store.dispatch_bound,
            "electionPriority": c.brokerElectionPriority})
        if str(self.controller_id) not in view["brokers"]:
            # cleaned from the controller's metadata: register again, and take the group's
            # epochs as they come from now on
            self.controller_id, self.master_epoch = None, -1
            return
        if view["masterBrokerId"] is None:
            view = await self.controller.call(RequestCode.CONTROLLER_ELECT_MASTER,
                                              {"brokerName": self.group})
        await self.apply(view)

    def _ha_addr(self) -> str:
        return f"{self.config.brokerIP1}:{self.config.ha_port}"

    # ---- roles ------------------------------------------------------------------------
    async def apply(self, view: dict[str, Any]) -> None:
        master, epoch = view["masterBrokerId"], view["masterEpoch"]
        if master is None or epoch < self.master_epoch:
            return  # an older view (a deposed controller leader answering late): ignore it
        if epoch > self.seen_epoch:
            self.master_switches += self.seen_epoch >= 0
            self.seen_epoch = epoch
        self.view = view
        if master == self.controller_id:
            if not self.is_master or self.master_epoch != epoch:
                await self._become_master(view)
            else:
                self._adopt_set(view)
        elif self.role != "SLAVE" or self.master_epoch != epoch:
            await self._become_slave(view)

    async def _become_master(self, view: dict[str, Any]) -> None:
        assert self.epochs is not None and self.controller_id is not None  # see step()
        await self.links.stop()
        epoch = view["masterEpoch"]
        end = self.store.commitlog.max_offset
        if epoch > self.epochs.last_epoch:
            self.epochs.append(epoch, end)
        c = self.config
        tracker = SyncStateTracker(
            self.controller_id, tuple(view["syncStateSet"]), view["syncStateSetEpoch"], end,
            mono_ms(), SyncConfig(max_not_catch_up_ms=c.haMaxTimeSlaveNotCatchUp,
                                 all_ack=c.allAckInSyncStateSet,
                                 in_sync_replicas=c.inSyncReplicas,
                                 min_in_sync_replicas=c.minInSyncReplicas))
        driver = AutoSwitchMasterDriver(self.store, ha_config(c, self.store), c.bindAddress,
                                        c.ha_port, self.epochs, tracker, self._propose,
                                        auth=self.auth, tls=c.tls)
        for _ in range(25):  # our own previous HA server may take a moment to let go
            try:
                await driver.start()
                break
            except OSError as e:
                log.warning("HA port %d busy (%s): retrying", c.ha_port, e)
                await asyncio.sleep(BIND_RETRY_S)
        else:
            raise RemotingError(f"cannot listen on the HA port {c.ha_port}")
        await self.links.lead(driver)
        self.role, self.master_epoch = "MASTER", epoch
        self.became_master += 1
        self.store.set_dispatch_bound(tracker.confirm_offset)
        log.warning("controller: broker %d is the master of %s in epoch %d (log end %d, "
                    "SyncStateSet %s)", self.controller_id, self.group, epoch, end,
                    view["syncStateSet"])
        await self.host.role_changed()  # serves every topic the log holds, routes

    async def _become_slave(self, view: dict[str, Any]) -> None:
        assert self.epochs is not None and self.controller_id is not None  # see step()
        await self.links.follow(AutoSwitchSlaveDriver(
            self.store, ha_config(self.config, self.store), self.epochs, self._master_ha_addr,
            slave_id=self.controller_id, learner=self.config.asyncLearner,
            from_last_file=self.config.syncFromLastFile, auth=self.auth,
            tls=self.config.tls))
        self.role, self.master_epoch = "SLAVE", view["masterEpoch"]
        log.info("controller: broker %d follows master %s (%s) in epoch %d", self.controller_id,
                 view["masterBrokerId"], view["masterHaAddress"], view["masterEpoch"])
        await self.host.role_changed()

    async def _master_ha_addr(self) -> str | None:
        return self.view.get("masterHaAddress")

    def _adopt_set(self, view: dict[str, Any]) -> None:
        """The controller's SyncStateSet is the truth (e.g. a change we asked for and whose
        answer was lost)."""
        ha = self.links.master
        if isinstance(ha, AutoSwitchMasterDriver):
            cast(AutoSwitchMaster, ha.core).tracker.controller_view(
                tuple(view["syncStateSet"]), view["syncStateSetEpoch"], mono_ms())
            ha.set_changed()

    def _propose(self, p: ProposeSyncStateSet) -> None:
        self._in_flight(self._alter(p))

    def _in_flight(self, request: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(request)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _alter(self, p: ProposeSyncStateSet) -> None:
        ha = self.links.master
        members, epoch, maybe_applied = None, p.set_epoch, False
        try:
            view = await self.controller.call(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {"brokerName": self.group, "masterId": self.controller_id,
                 "masterEpoch": self.master_epoch, "syncStateSetEpoch": p.set_epoch},
                body=list(p.members))
            members, epoch = tuple(view["syncStateSet"]), view["syncStateSetEpoch"]
            log.info("controller: SyncStateSet of %s is now %s (epoch %d)", self.group,
                     list(members), epoch)
        except ControllerRefused as e:
            log.warning("controller refused SyncStateSet %s: %s", list(p.members), e)
            maybe_applied = refusal_may_have_applied(str(e))
        except RemotingError as e:  # no (leader's) answer: it may have applied all the same
            log.warning("SyncStateSet %s: no answer from the controller: %s",
                        list(p.members), e)
            maybe_applied = True
        if ha is self.links.master and isinstance(ha, AutoSwitchMasterDriver):
            cast(AutoSwitchMaster, ha.core).tracker.applied(members, epoch, mono_ms(),
                                                            maybe_applied=maybe_applied)
            ha.set_changed()

    # ---- a hand-over on clients' reports (client_handover.py) --------------------------
    def _group_role(self) -> GroupRole | None:
        if self.controller_id is None or self.role == "NONE":
            return None
        me, ha = str(self.controller_id), self.links.master
        # the master's SyncStateSet as the controller last applied it (the view of the
        # last heartbeat can be older: CI saw a member refused that had just joined)
        in_set = frozenset(str(b) for b in cast(AutoSwitchMaster, ha.core).tracker.members) \
            if isinstance(ha, AutoSwitchMasterDriver) else frozenset()
        return GroupRole(self.is_master, me, in_set - {me})

    def _hand_to(self, follower: str) -> str | None:
        """The controller elects `follower` (a SyncStateSet member, so it holds every
        acknowledged message), as an operator's electMaster would."""
        self._in_flight(self._elect(int(follower)))
        return None

    async def _elect(self, broker_id: int) -> None:
        """(The new role comes with the next heartbeat's view: roles change in the
        heartbeat loop only, never from two tasks at once.)"""
        try:
            view = await self.controller.elect_master(self.group, broker_id)
        except (ControllerError, RemotingError) as e:
            log.warning("controller: electing broker %d of %s for its clients refused: %s",
                        broker_id, self.group, e)
            return
        log.warning("controller: %s handed to broker %d (epoch %d) for its clients",
                    self.group, broker_id, view["masterEpoch"])
