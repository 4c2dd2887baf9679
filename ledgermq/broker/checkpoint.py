"""Checkpoint mode (S3) on a broker: the driver of its CheckpointReplica core.

It heartbeats to the control node and turns the answers into roles: master (an HA master
whose sends complete on the consistent checkpoint), slave (an HA slave that reports with
its slot number, after rolling back past a takeover), or waiting (neither). It carries out
a promotion: replays the control node's cached messages past its log end, durably, and
answers with where they landed.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..replication.checkpoint import (
    AnswerPromotion, CheckpointReplica, Follow, Lead, Promote, Promotion, Replay, SaveRole,
    Stand, Truncate, View,
)
from ..controlnode.persist import decode_cached
from ..store.mapped_file import replace_file
from ..wire.message import decode_message, encode_properties
from .ha import CheckpointFile, HAMasterDriver, HASlaveDriver

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

# the sender waits syncFlushTimeout, then this for the control node: together they should
# stay below RocketMQ clients' 3 s send timeout (the control node answers in milliseconds)
CACHE_TIMEOUT_S = 1.0

PROMOTING_POLL_S = 0.02


def load_role(path: Path) -> tuple[int, Promotion | None]:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0, None
    p = d.get("promotion")
    if p is not None:
        p = Promotion(p["epoch"], p["takeover"],
                      tuple(tuple(x) for x in p["replayed"]) if p["replayed"] is not None
                      else None, p["logEnd"])
    return d["epoch"], p


def save_role(path: Path, epoch: int, p: Promotion | None) -> None:
    d = {"epoch": epoch, "promotion": None if p is None else {
        "epoch": p.epoch, "takeover": p.takeover, "logEnd": p.log_end,
        "replayed": None if p.replayed is None else [list(x) for x in p.replayed]}}
    replace_file(path, json.dumps(d).encode())


class CheckpointDriver:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.store = broker.store
        c = broker.config
        self.dir = self.store.config.root / "consistent-checkpoint"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.role_path = self.dir / "role.json"
        self.checkpoint_file = CheckpointFile(self.dir / "checkpoint.json")
        epoch, promotion = load_role(self.role_path)
        self.replica = CheckpointReplica(epoch, promotion)
        self.group = c.brokerName
        self.control_addr = c.controlNodeAddr
        self.wants_master = c.brokerRole.name != "SLAVE"
        self.client = RemotingClient()
        self.slot = 0
        self.master_epoch = -1  # the epoch this broker leads, when it is master
        self.slave_checkpoint = 0
        self._task: asyncio.Task | None = None
        self._answer: AnswerPromotion | None = None
        self._saved: tuple[float, tuple | None] = (0.0, None)  # last checkpoint file write

    @property
    def is_master(self) -> bool:
        return self.replica.role == "MASTER" and self.broker.ha_master is not None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._heartbeat_loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.client.close()

    # ---- heartbeats -----------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        interval = self.broker.config.controlNodeHeartbeatInterval / 1000
        while True:
            started = time.monotonic()
            try:
                await self.heartbeat()
            except (RemotingError, ValueError, KeyError) as e:
                log.debug("control node %s: %s", self.control_addr, e)
            except Exception:
                log.exception("checkpoint-mode heartbeat failed")
            # a promoted broker asks often, to start serving as soon as it is confirmed;
            # otherwise one heartbeat per interval, however long the last answer took
            period = PROMOTING_POLL_S if self.replica.promotion else interval
            await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))

    def _ha_addr(self) -> str:
        return f"{self.broker.config.brokerIP1}:{self.broker.ha_port}"

    async def heartbeat(self) -> None:
        ext = {"brokerName": self.group, "haAddr": self._ha_addr(),
               "brokerAddr": self.broker.address, "wantsMaster": str(self.wants_master).lower(),
               "epoch": str(self.replica.epoch), "maxOffset": str(self.store.commitlog.max_offset)}
        ha = self.broker.ha_master
        if ha is not None:
            ext["checkpoint"] = str(ha.core.checkpoint)
            ext["members"] = json.dumps(sorted(ha.core.members))
        r = await self.client.invoke(self.control_addr, RemotingCommand(
            RequestCode.CONTROL_HEARTBEAT, ext=ext), 3.0)
        if r.code != ResponseCode.SUCCESS:
            raise RemotingError(f"control node refused the heartbeat: {r.remark}")
        d = json.loads(r.body)
        view = View(d["epoch"], d["role"], d["slot"], d["masterAddr"], d["checkpoint"],
                    tuple(tuple(m) for m in d["members"]), d["truncateTo"])
        await self.execute(self.replica.on_view(view, self.store.commitlog.max_offset))

    # ---- actions --------------------------------------------------------------------
    async def execute(self, actions: list) -> None:
        b = self.broker
        for a in actions:
            if isinstance(a, Stand):
                log.warning("checkpoint mode: standing by (%s)", a.reason)
                await b._stop_ha()
                await b._reregister()
            elif isinstance(a, Truncate):
                log.warning("checkpoint mode: rolling back %d -> %d (past the takeover)",
                            self.store.commitlog.max_offset, a.offset)
                await b._stop_ha()
                self.store.truncate(a.offset)
            elif isinstance(a, SaveRole):
                save_role(self.role_path, a.epoch, a.promotion)
            elif isinstance(a, Follow):
                await b._stop_ha()
                self.slot = a.slot
                master = a.master_addr

                async def addr(master=master):
                    return master
                b.ha_slave = HASlaveDriver(self.store, b.ha_config(True), addr, slave_id=a.slot,
                                           on_checkpoint=self._slave_checkpoint)
                await b.ha_slave.start()
                log.info("checkpoint mode: slave (slot %d) of %s", a.slot, master)
                await b._reregister()
            elif isinstance(a, Lead):
                await self._lead(a)
            elif isinstance(a, Replay):
                await b._stop_ha()
                await self.execute(self._replay(a))
            elif isinstance(a, AnswerPromotion):
                self._answer = a

    def _slave_checkpoint(self, checkpoint: int) -> None:
        self.slave_checkpoint = checkpoint

    async def _lead(self, a: Lead) -> None:
        b = self.broker
        await b._stop_ha()
        self.slot = a.slot
        epoch, checkpoint, members = self.checkpoint_file.load()
        if epoch == a.epoch:  # restarted in the same epoch: our own record is newer
            checkpoint = max(checkpoint, a.checkpoint)
        else:
            checkpoint, members = a.checkpoint, dict(a.members)
        self.master_epoch = a.epoch
        self._saved = (0.0, None)
        self._save_checkpoint(checkpoint, tuple(members.items()))
        b.ha_master = HAMasterDriver(self.store, b.ha_config(True), b.config.bindAddress,
                                     b.config.ha_port, checkpoint=checkpoint, members=members,
                                     on_checkpoint=self._save_checkpoint)
        await b.ha_master.start()
        log.warning("checkpoint mode: master of epoch %d (checkpoint %d, members %s)", a.epoch,
                    checkpoint, sorted(members))
        b.adopt_stored_topics()
        await b._reregister()

    def _save_checkpoint(self, checkpoint: int, members: tuple) -> None:
        """The file only seeds a restart in the same epoch (failover relies on the control
        node's figure): new members are saved at once, progress at most 10 times a second."""
        now = time.monotonic()
        at, saved_ids = self._saved
        ids = tuple(slot for slot, _ in members)  # members are (slot, acked offset) pairs
        if ids != saved_ids or now - at >= 0.1:
            self._saved = (now, ids)
            self.checkpoint_file.save(self.master_epoch, checkpoint, members)

    def _replay(self, a: Replay) -> list:
        """Append each cached entry past the takeover (in order), durably."""
        moved = []
        for c in a.promote.replay:
            if c.end <= a.takeover:
                continue  # we hold it at its own offset already
            # past the takeover, or straddling it (a batch we got only the start of):
            # replayed whole, so nothing acknowledged is missing (the start twice)
            msgs, pos = [], 0
            while pos < len(c.data):
                m = decode_message(c.data, pos)
                msgs.append(m)
                pos += m.total_size
            start = self.store.commitlog.max_offset
            end = start
            for m in msgs:  # one entry is one send: one topic and queue
                r = self.store.append(self.store.encode(
                    m.topic, m.queue_id, [m.body], encode_properties(m.properties), m.tags,
                    flag=m.flag, sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
                    born_host=m.born_host, reconsume_times=m.reconsume_times,
                    index_keys=[m.index_keys]))
                if not r.ok:
                    raise RemotingError(f"replaying cached message failed: {r.error}")
                if end == start:
                    start = int(r.phys_offsets[0])
                end = r.end_offset
            moved.append((c.offset, start, end))
        self.store.commitlog.flush()
        log.warning("checkpoint mode: took over at %d, replayed %d cached sends", a.takeover,
                    len(moved))
        return self.replica.replayed(moved, self.store.commitlog.max_offset)

    async def promote(self, cmd: RemotingCommand) -> RemotingCommand:
        """The control node's CONTROL_PROMOTE: take over as master of a new epoch."""
        e = cmd.ext
        p = Promote(self._ha_addr(), self.slot, int(e["epoch"]), tuple(decode_cached(cmd.body or b"")),
                    int(e["checkpoint"]), tuple(tuple(m) for m in json.loads(e["members"])))
        self._answer = None
        await self.execute(self.replica.on_promote(p, self.store.commitlog.max_offset))
        if self._answer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"not promoted: already in epoch {self.replica.epoch}")
        pr = self._answer.promotion
        return cmd.response(ResponseCode.SUCCESS, None, None, json.dumps(
            {"takeover": pr.takeover, "replayed": [list(x) for x in pr.replayed],
             "logEnd": pr.log_end}).encode())

    # ---- sends ----------------------------------------------------------------------
    async def cache(self, offset: int, end: int, msg_id: str, data: bytes) -> bool:
        """S3-3: hand a message whose sync timed out to the control node."""
        try:
            r = await self.client.invoke(self.control_addr, RemotingCommand(
                RequestCode.CONTROL_CACHE, ext={
                    "brokerName": self.group, "epoch": str(self.master_epoch),
                    "offset": str(offset), "end": str(end), "msgId": msg_id}, body=data),
                CACHE_TIMEOUT_S)
        except RemotingError as e:
            log.warning("control node unreachable for caching: %s", e)
            return False
        return r.code == ResponseCode.SUCCESS

    def status(self) -> dict:
        out = {"role": self.replica.role, "epoch": self.replica.epoch, "slot": self.slot,
               "controlNode": self.control_addr}
        if self.broker.ha_slave is not None:
            out["checkpoint"] = self.slave_checkpoint
        return out
