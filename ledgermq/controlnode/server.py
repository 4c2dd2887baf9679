"""The control node process: a GroupControl core per broker group, driven over the
remoting protocol. Brokers heartbeat to it and learn their role; masters hand it the
messages whose sync timed out; producers ask it to resolve PENDING sends; it tells a
slave to take over when a master's heartbeats stop. Its state survives its restart."""
from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from ..peer_auth.core import PeerAuth
from ..peer_auth.remoting import PeerGate
from ..remoting import (
    Connection, RemotingClient, RemotingCommand, RemotingError, RemotingServer, RequestCode,
    ResponseCode,
)
from ..remoting.tls import DISABLED, Tls
from ..replication.checkpoint import (
    ControlConfig, GroupControl, Promote, SaveCache, SaveState, View,
)
from ..runtime.clock import mono_ms
from ..runtime.files import DirectoryLock
from .persist import GroupFiles, encode_cached

log = logging.getLogger(__name__)

PROMOTE_TIMEOUT_S = 30.0
# what only the group's brokers may say (producers' CONTROL_RESOLVE and the operators'
# CONTROL_STATUS read, and stay open)
AUTHENTICATED_CODES = frozenset({RequestCode.CONTROL_HEARTBEAT, RequestCode.CONTROL_CACHE})



def view_json(v: View) -> dict:
    return {"epoch": v.epoch, "role": v.role, "slot": v.slot, "masterAddr": v.master_addr,
            "checkpoint": v.checkpoint, "members": [list(m) for m in v.members],
            "truncateTo": v.truncate_to, "membersVersion": v.members_version}


class ControlNode:
    def __init__(self, directory: Path, host: str = "127.0.0.1", port: int = 9880,
                 config: ControlConfig | None = None, auth: PeerAuth | None = None,
                 metrics_port: int = 0, tls: Tls = DISABLED):
        """`auth`: the cluster secret; brokers heartbeat and hand over messages only on a
        connection that proved it, and a promotion proves it to the broker. `tls`: its
        port's tls.server.mode, and TLS to the brokers it promotes."""
        self.dir = Path(directory)
        self._dir_lock = DirectoryLock(self.dir, "control-node state")
        self._dir_lock.acquire()  # one control node per state directory
        self.config = config or ControlConfig()
        self.groups: dict[str, GroupControl] = {}
        self.files: dict[str, GroupFiles] = {}
        self.remoting_addr: dict[tuple[str, str], str] = {}  # (group, ha addr) -> broker addr
        self.auth = auth or PeerAuth()
        self.gate = PeerGate(self.auth, "control node")
        self.server = RemotingServer(self.handle, host, port, tls=tls, what="control node")
        self.client = RemotingClient(authenticate=self.gate.authenticate,
                                     ssl_context=tls.client)
        self._promoting: set[str] = set()
        self._task: asyncio.Task | None = None
        self.host, self.metrics_port = host, metrics_port  # Prometheus (0: off)
        self.metrics_server: asyncio.Server | None = None
        for d in sorted(self.dir.glob("*/state.json")) if self.dir.exists() else []:
            self._group(d.parent.name)

    @property
    def port(self) -> int:
        return self.server.port

    def _group(self, name: str) -> GroupControl:
        g = self.groups.get(name)
        if g is None:
            files = self.files[name] = GroupFiles(self.dir / name)
            state, cache = files.load()
            g = self.groups[name] = GroupControl(self.config, mono_ms(), state, cache)
            if state is not None:
                log.info("group %s: epoch %d, master slot %s, checkpoint %d, %d cached",
                         name, state.epoch, state.master, state.checkpoint, len(cache))
        return g

    async def start(self) -> None:
        await self.server.start()
        self._task = asyncio.create_task(self._tick_loop())
        if self.metrics_port:
            from ..metrics.serving import serve
            from .metrics import registry_for
            self.metrics_server = await serve(registry_for(self), self.host, self.metrics_port)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self.metrics_server is not None:
            self.metrics_server.close()
        await self.server.stop()
        await self.client.close()
        for f in self.files.values():
            f.close()
        self._dir_lock.release()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            for name, g in list(self.groups.items()):
                try:
                    self._execute(name, g.tick(mono_ms()))
                except Exception:
                    log.exception("control node tick of %s failed", name)

    def _execute(self, name: str, actions: list) -> None:
        g, files = self.groups[name], self.files[name]
        for a in actions:
            if isinstance(a, SaveState):
                files.save_state(a.state)
            elif isinstance(a, SaveCache):
                if a.entry is not None:
                    files.append(a.entry)
                else:
                    files.rewrite(g.cache)
            elif isinstance(a, Promote):
                if name not in self._promoting:
                    self._promoting.add(name)
                    asyncio.get_running_loop().create_task(self._promote(name, a))

    async def _promote(self, name: str, p: Promote) -> None:
        addr = self.remoting_addr.get((name, p.addr))
        try:
            if addr is None:
                raise RemotingError(f"no broker address known for {p.addr} yet")
            log.warning("group %s: master lost; promoting %s (epoch %d, %d cached messages)",
                        name, p.addr, p.epoch, len(p.replay))
            cmd = RemotingCommand(RequestCode.CONTROL_PROMOTE, ext={
                "brokerName": name, "epoch": str(p.epoch), "checkpoint": str(p.checkpoint),
                "members": json.dumps([list(m) for m in p.members])},
                body=encode_cached(p.replay))
            r = await self.client.invoke(addr, cmd, PROMOTE_TIMEOUT_S)
            if r.code != ResponseCode.SUCCESS:
                raise RemotingError(f"{addr} refused: {r.remark}")
            d = json.loads(r.body)
            g = self.groups[name]
            self._execute(name, g.promoted(p.slot, p.epoch, d["takeover"],
                                           [tuple(x) for x in d["replayed"]], d["logEnd"]))
            log.warning("group %s: %s is master of epoch %d (takeover offset %d)", name,
                        p.addr, p.epoch, d["takeover"])
        except (RemotingError, ValueError, KeyError) as e:
            log.warning("group %s: promotion of %s not confirmed: %s (asked again)", name,
                        p.addr, e)
        finally:
            self._promoting.discard(name)

    # ---- requests -------------------------------------------------------------------
    def handle(self, cmd: RemotingCommand, conn: Connection):
        screened = self.gate.screen(cmd, conn, AUTHENTICATED_CODES)
        if screened is not None:
            return screened
        try:
            if cmd.code == RequestCode.CONTROL_HEARTBEAT:
                return self._heartbeat(cmd)
            if cmd.code == RequestCode.CONTROL_CACHE:
                return self._cache(cmd)
            if cmd.code == RequestCode.CONTROL_RESOLVE:
                return self._resolve(cmd)
            if cmd.code == RequestCode.CONTROL_STATUS:
                return cmd.response(ResponseCode.SUCCESS, None, None, json.dumps(
                    {n: g.status() for n, g in self.groups.items()}).encode())
        except (KeyError, ValueError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad control-node request: {e}")
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"request code {cmd.code} is not supported by a control node")

    def _heartbeat(self, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext
        name = e["brokerName"]
        g = self._group(name)
        self.remoting_addr[(name, e["haAddr"])] = e["brokerAddr"]
        members = json.loads(e["members"]) if e.get("members") else None
        view, actions = g.heartbeat(e["haAddr"], e.get("wantsMaster") == "true",
                                    int(e["epoch"]), int(e["maxOffset"]), mono_ms(),
                                    int(e.get("checkpoint", 0)), members,
                                    int(e.get("membersVersion", 0)))
        self._execute(name, actions)
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json.dumps(view_json(view)).encode())

    def _cache(self, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext
        name = e["brokerName"]
        ok, actions = self._group(name).cache_message(
            int(e["epoch"]), int(e["offset"]), int(e["end"]), e["msgId"], cmd.body or b"")
        self._execute(name, actions)
        if not ok:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                "not cached: stale epoch, failover under way, or cache full")
        return cmd.response(ResponseCode.SUCCESS)

    def _resolve(self, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext
        res = self._group(e["brokerName"]).resolve(int(e["epoch"]), int(e["end"]),
                                                   e.get("msgId", ""))
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json.dumps({"resolution": res.value}).encode())
