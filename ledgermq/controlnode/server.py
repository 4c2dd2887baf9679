"""The control node process with its state in local files: one node per cluster. Each
change is written (fsynced) before the answer that depends on it goes out, so its state
survives its restart; while it is down nothing can elect (replicated.py runs a group of
them instead)."""
from __future__ import annotations

import logging
from pathlib import Path

from ..peer_auth.core import PeerAuth
from ..remoting import RemotingServer
from ..remoting.tls import DISABLED, Tls
from ..replication.checkpoint import ControlConfig, GroupControl, SaveCache, SaveState
from ..runtime.clock import mono_ms
from ..runtime.files import DirectoryLock
from .persist import GroupFiles
from .service import ControlService

log = logging.getLogger(__name__)


class ControlNode(ControlService):
    def __init__(self, directory: Path, host: str = "127.0.0.1", port: int = 9880,
                 config: ControlConfig | None = None, auth: PeerAuth | None = None,
                 metrics_port: int = 0, tls: Tls = DISABLED):
        """`auth`: the cluster secret; brokers heartbeat and hand over messages only on a
        connection that proved it, and a promotion proves it to the broker. `tls`: its
        port's tls.server.mode, and TLS to the brokers it promotes."""
        super().__init__(config, auth, tls, host, metrics_port)
        self.dir = Path(directory)
        self._dir_lock = DirectoryLock(self.dir, "control-node state")
        self._dir_lock.acquire()  # one control node per state directory
        self.files: dict[str, GroupFiles] = {}
        self.server = RemotingServer(self.handle, host, port, tls=tls, what="control node")
        for d in sorted(self.dir.glob("*/state.json")) if self.dir.exists() else []:
            self._group(d.parent.name)

    @property
    def port(self) -> int:
        return self.server.port

    def _load(self, name: str) -> GroupControl:
        files = self.files[name] = GroupFiles(self.dir / name)
        state, cache = files.load()
        if state is not None:
            log.info("group %s: epoch %d, master slot %s, checkpoint %d, %d cached",
                     name, state.epoch, state.master, state.checkpoint, len(cache))
        return GroupControl(self.config, mono_ms(), state, cache)

    def _persist(self, name: str, action: SaveState | SaveCache) -> None:
        files = self.files[name]
        if isinstance(action, SaveState):
            files.save_state(action.state)
        elif action.entry is not None:
            files.append(action.entry)
        else:
            files.rewrite(self.groups[name].cache)

    async def start(self) -> None:
        await self.server.start()
        await self._start_serving()

    async def stop(self) -> None:
        self._stop_serving()
        await self.server.stop()
        await self.client.close()
        for f in self.files.values():
            f.close()
        self._dir_lock.release()
