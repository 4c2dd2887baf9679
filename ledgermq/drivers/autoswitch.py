"""Controller mode (S1) on a broker: asyncio drivers of the AutoSwitchMaster and
AutoSwitchSlave cores over the HA port (wire: replication/autoswitch/wire.py).

The master streams commit-log bytes straight from the mapped segments, chunked at epoch
boundaries, and hands SyncStateSet changes to the ReplicasManager, which asks the
controller. Consumers see what the whole SyncStateSet holds (the confirm offset), on the
master and on slaves alike. A slave cuts its log where its epochs and the master's part,
crash-safely (the commit log's truncation marker first, then the epoch file).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ..peer_auth.core import PeerAuth
from ..remoting.tls import DISABLED, Tls
from ..replication.autoswitch.sync_state import ProposeSyncStateSet, SyncStateTracker
from ..replication.autoswitch.transfer import (
    AutoSwitchMaster, AutoSwitchSlave, Confirmed, EpochTransfer, RecordEpoch, SendEpochs,
    SendHandshake, TruncateLog,
)
from ..replication.autoswitch.wire import (
    EPOCH_PAIR, EPOCHS, FLAG_FROM_LAST_FILE, FLAG_LEARNER, HANDSHAKE, MASTER_HEADER, MAX_EPOCHS,
    REPORT, SLAVE_MSG, TRANSFER,
)
from ..replication.ha import Append, Close, Disconnect, HAConfig, Report, StartAt
from ..runtime.clock import mono_ms
from ..store import MessageStore, StoreError
from ..store.marks.epoch_file import EpochFile
from .ha import HAMasterDriver, HASlaveDriver

log = logging.getLogger(__name__)


def load_epochs(store: MessageStore) -> EpochFile:
    """The broker's EpochFile, without epochs that start past the log's end: a slave cuts
    its commit log first (crash-safely) and its epoch file second, so a crash between the
    two leaves such epochs behind, never a log tail that an epoch wrongly vouches for.
    The store must be open (recovered): before that its log "ends" at 0, and trimming to
    that would forget every epoch but the first (issue #28)."""
    if not store.is_open:
        raise StoreError("load_epochs needs the recovered store: open it first")
    epochs = EpochFile(store.config.root / "epochFile")
    epochs.truncate_from(store.commitlog.max_offset + 1)
    return epochs


class AutoSwitchMasterDriver(HAMasterDriver):
    def __init__(self, store: MessageStore, config: HAConfig, host: str, port: int,
                 epochs: EpochFile, tracker: SyncStateTracker,
                 on_propose: Callable[[ProposeSyncStateSet], None],
                 auth: PeerAuth | None = None, tls: Tls = DISABLED):
        super().__init__(store, config, host, port, auth=auth, tls=tls)
        self.core = AutoSwitchMaster(config, epochs.entries, store.commitlog.min_offset,
                                     store.commitlog.max_offset, tracker, mono_ms())
        self.on_propose = on_propose

    async def _read_slave(self, reader: asyncio.StreamReader, link: int, peer,
                          first: bytes = b"") -> None:
        """A handshake or a report (wire.py); `first`: its start, already read."""
        kind, a, b = SLAVE_MSG.unpack(first + await reader.readexactly(
            SLAVE_MSG.size - len(first)))
        if kind == HANDSHAKE:
            log.info("HA: slave %d (%s) says hello", a, peer)
            self.execute(self.core.handshake(link, a, bool(b & FLAG_LEARNER),
                                             bool(b & FLAG_FROM_LAST_FILE), mono_ms()))
        elif kind == REPORT:
            self.execute(self.core.report(link, a, mono_ms()))
        else:
            raise ValueError(f"unknown HA message kind {kind}")

    def execute(self, actions: list) -> None:
        rest = []
        for a in actions:
            if isinstance(a, EpochTransfer):
                why = self.send_log(a.link, a.offset, a.size, MASTER_HEADER.pack(
                    TRANSFER, a.offset, a.size, a.epoch, a.epoch_start, a.confirm))
                if why is not None:
                    rest.append(Close(a.link, why))
            elif isinstance(a, SendEpochs):
                w = self.writer(a.link)
                if w is not None:
                    w.write(MASTER_HEADER.pack(EPOCHS, a.log_end, len(a.epochs), 0, 0, 0) +
                            b"".join(EPOCH_PAIR.pack(e, s) for e, s in a.epochs))
            elif isinstance(a, ProposeSyncStateSet):
                self.on_propose(a)
            else:
                rest.append(a)
        super().execute(rest)
        self.store.set_dispatch_bound(self.core.tracker.confirm_offset)

    def set_changed(self) -> None:
        """The tracker learned the controller's set: writes it now covers complete."""
        self.execute(self.core.set_changed())

    def status(self) -> dict:
        t = self.core.tracker
        return {**self.core.status(), "epochs": self.core.epochs,
                "syncStateSet": list(t.members), "syncStateSetEpoch": t.set_epoch,
                "confirmOffset": t.confirm_offset,
                "acks": {str(k): v for k, v in t.acks.items()}}


class AutoSwitchSlaveDriver(HASlaveDriver):
    def __init__(self, store: MessageStore, config: HAConfig, epochs: EpochFile,
                 master_addr: Callable[[], Awaitable[str | None]], *, slave_id: int,
                 learner: bool = False, from_last_file: bool = False,
                 auth: PeerAuth | None = None, tls: Tls = DISABLED):
        super().__init__(store, config, master_addr, slave_id=slave_id, auth=auth, tls=tls)
        self.epochs = epochs
        self.learner = learner
        self.from_last_file = from_last_file  # syncFromLastFile: said in the handshake
        self.core = self._new_core()

    def _new_core(self) -> AutoSwitchSlave:
        return AutoSwitchSlave(self.config, self.slave_id, self.epochs.entries,
                               self.store.commitlog.max_offset, mono_ms(), learner=self.learner,
                               from_last_file=self.from_last_file)

    async def _follow(self, addr: str) -> None:
        reader = await self._connect(addr)
        writer = self.writer
        self.core = self._new_core()
        log.info("HA: slave %d following master %s from offset %d", self.slave_id, addr,
                 self.core.max_offset)
        self.execute(self.core.connected(mono_ms()))
        while self.writer is writer:
            kind, offset, size, epoch, start, confirm = MASTER_HEADER.unpack(
                await reader.readexactly(MASTER_HEADER.size))
            self.frames += 1
            if kind == EPOCHS:
                if not 0 <= size <= MAX_EPOCHS:
                    raise ValueError(f"bad epoch count {size}")
                raw = await reader.readexactly(size * EPOCH_PAIR.size)
                pairs = [EPOCH_PAIR.unpack_from(raw, k * EPOCH_PAIR.size) for k in range(size)]
                self.execute(self.core.master_epochs(pairs, offset, mono_ms()))
            elif kind == TRANSFER:
                if not 0 <= size <= (64 << 20):
                    raise ValueError(f"bad HA transfer size {size}")
                body = await reader.readexactly(size) if size else b""
                self.execute(self.core.data(offset, size, epoch, start, confirm, body,
                                            mono_ms()))
            else:
                raise ValueError(f"unknown HA frame kind {kind}")

    def execute(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, SendHandshake):
                flags = (FLAG_LEARNER if a.learner else 0) | \
                    (FLAG_FROM_LAST_FILE if a.from_last_file else 0)
                self.write(SLAVE_MSG.pack(HANDSHAKE, a.slave_id, flags))
            elif isinstance(a, Report):
                self.write(SLAVE_MSG.pack(REPORT, a.offset, 0))
            elif isinstance(a, TruncateLog):
                log.warning("HA: truncating the log from %d to %d to match the master's "
                            "epochs", self.store.commitlog.max_offset, a.offset)
                self.store.truncate(max(a.offset, self.store.commitlog.min_offset))
                self.epochs.truncate_from(a.offset)
            elif isinstance(a, RecordEpoch):
                self.epochs.append(a.epoch, a.start)
            elif isinstance(a, Confirmed):
                self.store.set_dispatch_bound(a.offset)
            elif isinstance(a, (Append, StartAt, Disconnect)):
                super().execute([a])
                if isinstance(a, Append):
                    self.store.set_dispatch_bound(self.core.confirmed)
            else:
                super().execute([a])

    def status(self) -> dict:
        return {**super().status(), "epochs": self.epochs.entries,
                "confirmOffset": self.core.confirmed, "learner": self.learner}
