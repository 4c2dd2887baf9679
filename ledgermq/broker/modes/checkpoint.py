"""Checkpoint mode (S3): the patent's consistent checkpoint with a control node.

The broker's CheckpointReplica core turns the control node's views into roles: master (an
HA master whose writes are acknowledged once the consistent checkpoint covers them, or once
the control node caches them), slave (an HA slave reporting with its slot, after rolling
back past a takeover) or waiting (neither). A promotion replays the control node's cached
messages past the log end, durably, and answers with where they landed.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from typing import Sequence, cast

from ...controlnode.persist import decode_cached
from ...drivers.checkpoint_files import CheckpointFile, load_role, save_role
from ...drivers.control_node import CACHE_TIMEOUT_S, ControlNodeClient
from ...drivers.ha import HAMasterDriver, HASlaveDriver
from ...remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ...remoting.transport import Connection, Handler
from ...replication.checkpoint import (
    AnswerPromotion, CheckpointReplica, Follow, Lead, Promote, Replay, Resolution, SaveRole,
    Stand, Truncate, View, lead_start,
)
from ...replication.ha import SyncStatus
from ...runtime.clock import mono_ms
from ...store import PutResult, StoreError
from ...wire.batch import EncodedBatch
from ...wire.message import decode_message
from .base import Later, ModeHost, Pending, beat_every
from .checkpoint_reads import KeptWrites, Write
from .client_handover import ClientHandOver, GroupRole
from .disk_handover import FullDiskHandOver
from .ha_links import HAPortMode, ha_config
from .protocol import Metric

log = logging.getLogger(__name__)

PROMOTING_POLL_S = 0.02
RESOLVE_POLL_S = 0.1  # between two questions to the control node about a pending send
DISK_LOG_EVERY_S = 10
NOT_COVERED = "not yet covered by the consistent checkpoint and not cached by the control node"


class CheckpointMode(HAPortMode):
    name = "checkpoint"

    def __init__(self, host: ModeHost) -> None:
        super().__init__(host)
        self.dir = self.store.config.root / "consistent-checkpoint"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.role_path = self.dir / "role.json"
        self.checkpoint_file = CheckpointFile(self.dir / "checkpoint")
        epoch, promotion = load_role(self.role_path)
        self.replica = CheckpointReplica(epoch, promotion)
        self.control = ControlNodeClient(self.config.controlNodeAddr, self.config.brokerName,
                                         self.auth, ssl_context=self.config.tls.client)
        self.wants_master = self.config.brokerRole.name != "SLAVE"
        self.slot = 0
        # a slave standing by stays in the route under its slot until its next role: its
        # group's only other brokers may be a dead master and a slave being promoted, and
        # a group out of the route is one clients stop using until their next refresh
        self.standby_slot: int | None = None
        self.master_epoch = -1  # the epoch this broker leads, when it is master
        self.slave_checkpoint = 0
        self.reads: KeptWrites | None = None  # a master's: what consumers may read
        self._task: asyncio.Task[None] | None = None
        self._answer: AnswerPromotion | None = None
        self.pending_sends = 0  # answered PENDING (for the metrics)
        self.cached_sends = 0  # acknowledged once the control node cached them
        # pending sends the broker resolved for clients that cannot, by resolution
        self.resolved_by_broker = {r: 0 for r in Resolution}
        self.became_master = 0
        self.hand_over = ClientHandOver(host, self.name, self._group_role, self._hand_to)
        self.full_disk = FullDiskHandOver(host, self.name, self._group_role, self._hand_to,
                                          self.replica_offsets)
        self._asking: set[asyncio.Task[None]] = set()  # hand-overs asked of the control node
        self._disk_refused_logged = float("-inf")

    # ---- what the broker asks -------------------------------------------------------
    @property
    def is_writable(self) -> bool:
        return self.replica.role == "MASTER" and self.links.master is not None

    @property
    def broker_id(self) -> int | None:
        """The master is 0, a slave (also one standing by) its control-node slot; None for a
        broker without a role yet and a master standing by (it cannot take writes)."""
        if self.is_writable:
            return 0
        return self.slot if self.links.slave is not None else self.standby_slot

    @property
    def state_version(self) -> int:
        """The epoch this broker is in: a master deposed while paused registers an older
        one than its successor."""
        return max(self.replica.epoch, 0)

    def refuse_write(self) -> str | None:
        return None if self.is_writable else self.not_master(self.replica.role)

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        result, ha = self.append_and_push(encoded)
        if ha is None or self.reads is None:
            return self.after_append(result)
        kept = self.reads.appended(result.end_offset)
        # no flush wait of its own, whatever flushDiskType says: the checkpoint covers
        # only what the master flushed (it sends its slaves nothing else), so the write is
        # on the master's disk and on every member's once the checkpoint covers it
        done = asyncio.ensure_future(self._covered(result, ha.sync(result.end_offset),
                                                   self.reads, kept))
        return Later(done, lambda outcome: outcome, may_pend=True)

    def write_internal(self, encoded: EncodedBatch) -> PutResult:
        """Consumers see the broker's own writes once the checkpoint covers them (the
        control node caches only sends)."""
        result, ha = self.append_and_push(encoded)
        if ha is not None and self.reads is not None:
            self.reads.appended(result.end_offset)
        return result

    async def _covered(self, result: PutResult, synced: asyncio.Future[SyncStatus],
                       reads: KeptWrites, kept: Write) -> PutResult | Pending:
        """S3-3: acknowledged once the consistent checkpoint covers the write, or once the
        control node holds it; otherwise pending, for the producer to resolve. Consumers
        see it from then (checkpoint_reads.py)."""
        loop = asyncio.get_running_loop()
        resolve_by = loop.time() + self.config.checkpointResolveWithinMillis / 1000
        if await synced is SyncStatus.OK:
            reads.kept(kept)
            return result
        offsets = result.phys_offsets
        assert offsets is not None  # a stored write's
        start = int(offsets[0])
        epoch = self.master_epoch
        msg_id = f"{epoch}-{start}"
        log_ = self.store.commitlog
        try:
            data = b"".join(bytes(log_.read(int(o), log_.size_at(int(o))))
                            for o in offsets)
        except StoreError:  # rolled back meanwhile: it is not ours to keep
            data = b""
        if data and await self.control.cache(epoch, start, result.end_offset, msg_id, data):
            self.cached_sends += 1
            reads.kept(kept)
            return result
        self.pending_sends += 1
        return Pending(result, epoch, msg_id, NOT_COVERED, functools.partial(
            self._resolve, epoch, result.end_offset, msg_id, resolve_by, reads, kept))

    async def _resolve(self, epoch: int, end: int, msg_id: str, by: float,
                       reads: KeptWrites, kept: Write) -> Resolution:
        """S3-4 done by the broker, for a producer that cannot: the control node's answer,
        asked until it knows or `by` (loop time) has passed. Only the control node can
        say: it alone knows whether another master has taken over meanwhile. DONE also
        when it cached the send and its answer came too late: consumers may read it."""
        loop = asyncio.get_running_loop()
        while True:
            left = by - loop.time()
            answer = await self.control.resolve(epoch, end, msg_id,
                                                min(CACHE_TIMEOUT_S, max(left, 0.1)))
            if answer is not Resolution.UNKNOWN or by - loop.time() <= 0:
                self.resolved_by_broker[answer] += 1
                if answer is Resolution.DONE:
                    reads.kept(kept)
                return answer
            await asyncio.sleep(min(RESOLVE_POLL_S, by - loop.time()))

    def handlers(self) -> dict[int, Handler]:
        # (looked up at each request: tests list a mode's codes on an instance not set up)
        return {RequestCode.CONTROL_PROMOTE: self._promote,
                RequestCode.REPORT_MASTER_UNREACHABLE:
                lambda cmd, conn: self.hand_over.client_report(cmd, conn),
                RequestCode.CLIENTS_CANNOT_REACH_LEADER:
                lambda cmd, conn: self.hand_over.follower_report(cmd, conn)}

    def metrics(self) -> list[Metric]:
        out = super().metrics() + [
            ("ledgermq_checkpoint_epoch", "The epoch this broker is in.", {}, self.replica.epoch),
            ("ledgermq_checkpoint_pending_sends_total", "Sends answered PENDING (neither "
             "covered by the checkpoint nor cached by the control node in time).", {},
             self.pending_sends),
            ("ledgermq_checkpoint_cached_sends_total", "Sends acknowledged because the control "
             "node cached them.", {}, self.cached_sends),
            ("ledgermq_checkpoint_became_master_total", "Times this broker became master.", {},
             self.became_master)] + [
            ("ledgermq_checkpoint_resolved_by_broker_total", "PENDING sends of clients that "
             "know no PENDING, resolved by the broker while they waited (UNKNOWN: answered "
             "FLUSH_SLAVE_TIMEOUT).", {"resolution": r.value}, n)
            for r, n in self.resolved_by_broker.items()] + self.hand_over.metrics() \
            + self.full_disk.metrics()
        ha = self.links.master
        if ha is not None:
            out += [("ledgermq_checkpoint_offset", "The consistent checkpoint (bytes): saved "
                     "on a master, held on a slave.", {}, ha.core.saved),
                    ("ledgermq_checkpoint_waiting_sends", "Sends waiting for the checkpoint "
                     "to cover them.", {}, len(ha.core.waiters)),
                    ("ledgermq_checkpoint_members", "Slaves the checkpoint spans.", {},
                     len(ha.core.members))]
        elif self.links.slave is not None:
            out.append(("ledgermq_checkpoint_offset", "The consistent checkpoint (bytes): saved "
                        "on a master, held on a slave.", {}, self.slave_checkpoint))
        return out

    def replica_offsets(self) -> dict[str, int]:
        """Connected slaves by slot, and every member, connected or not."""
        out = super().replica_offsets()
        ha = self.links.master
        if ha is not None:
            out.update({str(s): off for s, off in ha.core.members.items()})
        return out

    def runtime_info(self) -> dict[str, str]:
        st: dict[str, object] = {"role": self.replica.role, "epoch": self.replica.epoch,
                                 "slot": self.slot, "controlNode": self.config.controlNodeAddr}
        if self.links.slave is not None:
            st["checkpoint"] = self.slave_checkpoint
        return {**super().runtime_info(), "brokerRole": self.replica.role,
                "checkpoint": json.dumps(st)}

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        self._task = asyncio.create_task(self._heartbeat_loop())
        self.full_disk.start()

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._asking] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.hand_over.stop()
        await self.full_disk.stop()
        await super().stop()
        await self.control.close()

    async def _heartbeat_loop(self) -> None:
        interval = self.config.controlNodeHeartbeatInterval / 1000
        # a promoted broker asks often, to start serving as soon as it is confirmed
        await beat_every(lambda: PROMOTING_POLL_S if self.replica.promotion else interval,
                         self.heartbeat, (RemotingError, ValueError, KeyError),
                         f"heartbeat to control node {self.config.controlNodeAddr}")

    def _ha_addr(self) -> str:
        return f"{self.config.brokerIP1}:{self.ha_port}"

    async def heartbeat(self) -> None:
        ext = {"haAddr": self._ha_addr(), "brokerAddr": self.host.address,
               "wantsMaster": str(self.wants_master).lower(),
               "epoch": str(self.replica.epoch), "maxOffset": str(self.store.commitlog.max_offset)}
        ha = self.links.master
        if ha is not None:
            version, members = ha.core.proposal()
            ext["checkpoint"] = str(ha.core.saved)  # (only what our file holds)
            ext["members"] = json.dumps(list(members))
            ext["membersVersion"] = str(version)
        view = await self.control.heartbeat(ext)
        await self.execute(self.replica.on_view(view, self.store.commitlog.max_offset))
        if ha is not None and ha is self.links.master and view.role == "MASTER" \
                and view.epoch == self.master_epoch:
            self._members_saved(ha, view)

    def _members_saved(self, ha: HAMasterDriver, view: View) -> None:
        """The control node saved a membership: a member it no longer names is dropped."""
        leaving = dict(ha.core.membership.leaving)
        ha.execute(ha.core.members_saved(view.members_version, [s for s, _ in view.members],
                                         mono_ms()))
        for sid, why in leaving.items():
            if sid not in ha.core.members:
                log.warning("checkpoint mode: slave %d no longer counts in the consistent "
                            "checkpoint (%s); it rejoins once it holds it", sid, why)

    # ---- the core's actions ---------------------------------------------------------
    async def execute(self, actions: Sequence[object]) -> None:
        """The replica core's actions, in order. The core moves to its new role before
        the role is saved: a save (or a cut) the disk refuses would leave it believing a
        role this broker never took, and the same view again asks nothing of it (a
        deposed master whose disk was full never followed its successor). Then the
        broker stands by and starts again from the role its disk holds; the next view
        gives the actions again."""
        try:
            await self._execute(actions)
        except OSError as e:
            now = time.monotonic()
            if now - self._disk_refused_logged >= DISK_LOG_EVERY_S:  # (each heartbeat
                self._disk_refused_logged = now                      # tries again)
                log.error("checkpoint mode: the disk refused a role change (%s): standing "
                          "by, starting again from the role on disk (logged at most every "
                          "%d s)", e, DISK_LOG_EVERY_S)
            await self.links.stop()
            self.replica = CheckpointReplica(*load_role(self.role_path))
            await self.host.role_changed()

    async def _execute(self, actions: Sequence[object]) -> None:
        for a in actions:
            if isinstance(a, Stand):
                log.warning("checkpoint mode: standing by (%s)", a.reason)
                if self.links.master is not None:
                    self.standby_slot = None
                elif self.links.slave is not None:
                    self.standby_slot = self.slot
                await self.links.stop()
                await self.host.role_changed()
            elif isinstance(a, Truncate):
                log.warning("checkpoint mode: rolling back %d -> %d (past the takeover)",
                            self.store.commitlog.max_offset, a.offset)
                await self.links.stop()
                self.store.truncate(a.offset)
            elif isinstance(a, SaveRole):
                save_role(self.role_path, a.epoch, a.promotion)
            elif isinstance(a, Follow):
                await self._follow(a)
            elif isinstance(a, Lead):
                await self._lead(a)
            elif isinstance(a, Replay):
                await self.links.stop()
                await self.execute(self._replay(a))
            elif isinstance(a, AnswerPromotion):
                self._answer = a

    async def _follow(self, a: Follow) -> None:
        await self.links.stop()
        self.slot = a.slot

        async def master(addr: str = a.master_addr) -> str:
            return addr
        await self.links.follow(HASlaveDriver(
            self.store, ha_config(self.config, self.store, True), master, slave_id=a.slot,
            epoch=self.replica.epoch, on_checkpoint=self._slave_checkpoint, auth=self.auth,
            tls=self.config.tls))
        log.info("checkpoint mode: slave (slot %d) of %s", a.slot, a.master_addr)
        await self.host.role_changed()

    def _slave_checkpoint(self, checkpoint: int) -> None:
        self.slave_checkpoint = checkpoint
        self.store.set_dispatch_bound(checkpoint)  # (what every member holds)

    async def _lead(self, a: Lead) -> None:
        await self.links.stop()
        self.slot = a.slot
        saved = self.checkpoint_file.load()
        checkpoint, members = lead_start(a, saved)
        self.master_epoch = a.epoch
        self.became_master += 1
        # The file seeds a restart of this master in the same epoch, where its checkpoint
        # gates who joins as a member (a candidate for the next master): it must then be at
        # least every write acknowledged and every checkpoint the slaves or the control
        # node were told. So each save is fsynced, and the driver publishes (to slaves and,
        # through `core.saved`, to the control node) and counts a checkpoint only once its
        # save returned: no rate limit, one save at a time, the newest waiting one next.
        # a promoted master shows its whole log: what it took over and replayed is the
        # group's history now (S3-5); a restarted one only what its checkpoint covers
        shown = self.store.commitlog.max_offset if saved[0] != a.epoch else checkpoint
        reads = KeptWrites(self.store, max(checkpoint, shown), bool(members))
        loop = asyncio.get_running_loop()

        def save(checkpoint: int, members: tuple[tuple[int, int], ...]) -> None:  # (thread)
            self.checkpoint_file.save(a.epoch, checkpoint, members)
            loop.call_soon_threadsafe(reads.checkpoint_saved, checkpoint, bool(members))
        save(checkpoint, tuple(members.items()))
        self.reads = reads
        c = self.config
        driver = HAMasterDriver(self.store, ha_config(c, self.store, True), c.bindAddress,
                                c.ha_port, checkpoint=checkpoint, members=members,
                                epoch=a.epoch, on_checkpoint=save, auth=self.auth, tls=c.tls)
        await driver.start()
        await self.links.lead(driver)
        log.warning("checkpoint mode: master of epoch %d (checkpoint %d, members %s)", a.epoch,
                    checkpoint, sorted(members))
        await self.host.role_changed()

    def _replay(self, a: Replay) -> Sequence[object]:
        """Append each cached entry's messages past the takeover (in order), durably."""
        moved: list[tuple[int, int, int]] = []
        for c in a.promote.replay:
            if c.end <= a.takeover:
                continue  # we hold it at its own offset already
            # past the takeover, or straddling it (a batch we got only the start of):
            # only its messages from the takeover on, so none is stored twice
            data, msgs, pos = c.tail(a.takeover), [], 0
            while pos < len(data):  # decoded whole before anything is appended
                msgs.append(decode_message(data, pos))
                pos += msgs[-1].total_size
            start = end = self.store.commitlog.max_offset
            for m in msgs:  # one entry is one send: one topic and queue
                r = self.store.append(
                    self.store.encode_again(m, m.topic, m.queue_id, m.properties))
                if not r.ok:
                    raise RemotingError(f"replaying cached message failed: {r.error}")
                if end == start:
                    assert r.phys_offsets is not None  # r.ok
                    start = int(r.phys_offsets[0])
                end = r.end_offset
            moved.append((c.offset, start, end))
        self.store.commitlog.flush()
        log.warning("checkpoint mode: took over at %d, replayed %d cached sends", a.takeover,
                    len(moved))
        return self.replica.replayed(moved, self.store.commitlog.max_offset)

    async def _promote(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The control node's CONTROL_PROMOTE: take over as master of a new epoch."""
        e = cmd.ext
        p = Promote(self._ha_addr(), self.slot, int(e["epoch"]),
                    tuple(decode_cached(cast(bytes, cmd.body) or b"")), int(e["checkpoint"]),
                    tuple(tuple(m) for m in json.loads(e["members"])))
        self._answer = None
        await self.execute(self.replica.on_promote(p, self.store.commitlog.max_offset))
        if self._answer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"not promoted: already in epoch {self.replica.epoch}")
        pr = self._answer.promotion
        return cmd.response(ResponseCode.SUCCESS, None, None, json.dumps(
            {"takeover": pr.takeover, "replayed": [list(x) for x in pr.replayed],
             "logEnd": pr.log_end}).encode())

    # ---- a hand-over on clients' reports (client_handover.py) --------------------------
    def _group_role(self) -> GroupRole | None:
        if not self.slot or self.replica.role not in ("MASTER", "SLAVE"):
            return None
        ha = self.links.master
        members = frozenset(str(s) for s in ha.core.members) if ha is not None else frozenset()
        return GroupRole(self.is_writable, str(self.slot), members - {str(self.slot)})

    def _hand_to(self, follower: str) -> str | None:
        """The control node fails over now, to the member `follower` if it may take over
        (the longest member otherwise), as if this master's heartbeats had stopped."""
        task = asyncio.get_running_loop().create_task(self._ask_hand_over(int(follower)))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)
        return None

    async def _ask_hand_over(self, slot: int) -> None:
        try:
            why = await self.control.hand_over(self._ha_addr(), self.master_epoch, slot)
        except RemotingError as e:
            why = f"the control node did not answer: {e}"
        if why is not None:
            log.warning("checkpoint mode: the control node refused the hand-over to slot %d: "
                        "%s", slot, why)
