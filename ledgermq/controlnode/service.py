"""What every control node serves, however it keeps its state: a GroupControl core per
broker group, driven over the remoting protocol. Brokers heartbeat to it and learn their
role; masters hand it the messages whose sync timed out; producers ask it to resolve
PENDING sends; it tells a slave to take over when a master's heartbeats stop.

Where the state is kept is the subclass's: local files (server.ControlNode, one node) or a
Raft log (replicated.ReplicatedControlNode, a group of nodes any of which can lead). The
rule is the same: an answer goes out only once every change it may reflect is durable,
and a slave is promoted only once the state naming it is."""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable

from ..peer_auth.core import PeerAuth
from ..peer_auth.remoting import PeerGate
from ..remoting import (
    Connection, RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode,
)
from ..remoting.tls import Tls
from ..replication.checkpoint import ControlConfig, GroupControl, Promote, SaveCache, SaveState, View
from ..runtime.clock import mono_ms
from .persist import encode_cached

log = logging.getLogger(__name__)

PROMOTE_TIMEOUT_S = 30.0
DURABLE_TIMEOUT_S = 3.0  # an answer waits this long for its changes to be durable
# what only the group's brokers may say (producers' CONTROL_RESOLVE and the operators'
# CONTROL_STATUS read, and stay open)
AUTHENTICATED_CODES = frozenset({RequestCode.CONTROL_HEARTBEAT, RequestCode.CONTROL_CACHE,
                                 RequestCode.CONTROL_HAND_OVER})


def view_json(v: View) -> dict:
    return {"epoch": v.epoch, "role": v.role, "slot": v.slot, "masterAddr": v.master_addr,
            "checkpoint": v.checkpoint, "members": [list(m) for m in v.members],
            "truncateTo": v.truncate_to, "membersVersion": v.members_version}


class ControlService:
    """Subclasses keep the state: `_persist` an action, `_durable` (what to wait for before
    answering), `_refusal` (why this node does not serve now) and `_load` a group."""

    def __init__(self, config: ControlConfig | None, auth: PeerAuth | None, tls: Tls,
                 host: str, metrics_port: int):
        self.config = config or ControlConfig()
        self.groups: dict[str, GroupControl] = {}
        self.remoting_addr: dict[tuple[str, str], str] = {}  # (group, ha addr) -> broker addr
        self.auth = auth or PeerAuth()
        self.gate = PeerGate(self.auth, "control node")
        self.client = RemotingClient(authenticate=self.gate.authenticate,
                                     ssl_context=tls.client)
        self._promoting: set[str] = set()
        self._tick_task: asyncio.Task | None = None
        self.host, self.metrics_port = host, metrics_port  # Prometheus (0: off)
        self.metrics_server: asyncio.Server | None = None

    async def _start_serving(self) -> None:
        """The failover ticks, and the metrics port (once the requests' port is up)."""
        self._tick_task = asyncio.create_task(self._tick_loop())
        if self.metrics_port:
            from ..metrics.serving import serve
            from .metrics import registry_for
            self.metrics_server = await serve(registry_for(self), self.host, self.metrics_port)

    def _stop_serving(self) -> None:
        if self._tick_task:
            self._tick_task.cancel()
        if self.metrics_server is not None:
            self.metrics_server.close()

    # ---- what a subclass provides ---------------------------------------------------
    def _load(self, name: str) -> GroupControl:
        raise NotImplementedError

    def _persist(self, name: str, action: SaveState | SaveCache) -> None:
        raise NotImplementedError

    def _durable(self) -> "asyncio.Future[Any] | None":
        """What an answer must wait for (every change made so far durable); None: nothing."""
        return None

    def _refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """A refusal when this node does not serve requests now (a follower)."""
        return None

    # ---- groups and their actions -----------------------------------------------------
    def _group(self, name: str) -> GroupControl:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = self._load(name)
        return g

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            for name, g in list(self.groups.items()):
                try:
                    self._execute(name, g.tick(mono_ms()))
                except Exception:
                    log.exception("control node tick of %s failed", name)

    def _execute(self, name: str, actions: list) -> None:
        for a in actions:
            if isinstance(a, (SaveState, SaveCache)):
                self._persist(name, a)
            elif isinstance(a, Promote):
                if name not in self._promoting:
                    self._promoting.add(name)
                    asyncio.get_running_loop().create_task(
                        self._promote(name, self.groups[name], a, self._durable()))

    async def _promote(self, name: str, g: GroupControl, p: Promote,
                       saved: "asyncio.Future[Any] | None") -> None:
        addr = self.remoting_addr.get((name, p.addr))
        try:
            if saved is not None:  # the state naming it, durable first
                await asyncio.wait_for(asyncio.shield(saved), DURABLE_TIMEOUT_S)
            if self.groups.get(name) is not g:
                return  # no longer ours to drive (this node stopped leading)
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
            if self.groups.get(name) is not g:
                return
            self._execute(name, g.promoted(p.slot, p.epoch, d["takeover"],
                                           [tuple(x) for x in d["replayed"]], d["logEnd"]))
            log.warning("group %s: %s is master of epoch %d (takeover offset %d)", name,
                        p.addr, p.epoch, d["takeover"])
        except (RemotingError, ValueError, KeyError, asyncio.TimeoutError) as e:
            log.warning("group %s: promotion of %s not confirmed: %s (asked again)", name,
                        p.addr, e or "its state was not saved in time")
        finally:
            self._promoting.discard(name)

    # ---- requests -------------------------------------------------------------------
    def handle(self, cmd: RemotingCommand,
               conn: Connection) -> RemotingCommand | Awaitable[RemotingCommand]:
        screened = self.gate.screen(cmd, conn, AUTHENTICATED_CODES)
        if screened is not None:
            return screened
        if cmd.code not in (RequestCode.CONTROL_HEARTBEAT, RequestCode.CONTROL_CACHE,
                            RequestCode.CONTROL_RESOLVE, RequestCode.CONTROL_STATUS,
                            RequestCode.CONTROL_HAND_OVER):
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f"request code {cmd.code} is not supported by a control node")
        refused = self._refusal(cmd)
        if refused is not None:
            return refused
        try:
            if cmd.code == RequestCode.CONTROL_HEARTBEAT:
                resp = self._heartbeat(cmd)
            elif cmd.code == RequestCode.CONTROL_CACHE:
                resp = self._cache(cmd)
            elif cmd.code == RequestCode.CONTROL_RESOLVE:
                resp = self._resolve(cmd)
            elif cmd.code == RequestCode.CONTROL_HAND_OVER:
                resp = self._hand_over(cmd)
            else:
                resp = cmd.response(ResponseCode.SUCCESS, None, None, json.dumps(
                    {n: g.status() for n, g in self.groups.items()}).encode())
        except (KeyError, ValueError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad control-node request: {e}")
        durable = self._durable()
        return resp if durable is None else self._once_durable(cmd, resp, durable)

    async def _once_durable(self, cmd: RemotingCommand, resp: RemotingCommand,
                            durable: "asyncio.Future[Any]") -> RemotingCommand:
        try:
            ok = await asyncio.wait_for(asyncio.shield(durable), DURABLE_TIMEOUT_S)
        except asyncio.TimeoutError:
            ok = False
        if ok:
            return resp
        return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER, "not saved: this control node "
                            "lost its group's majority before the change was durable")

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

    def _hand_over(self, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext
        name = e["brokerName"]
        why, actions = self._group(name).hand_over(e["haAddr"], int(e["epoch"]), mono_ms(),
                                                   int(e.get("preferSlot", -1)))
        if why is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no hand-over of {name}: {why}")
        log.warning("group %s: master %s gives the group up (its clients cannot reach it)",
                    name, e["haAddr"])
        self._execute(name, actions)
        return cmd.response(ResponseCode.SUCCESS)

    def _resolve(self, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext
        res = self._group(e["brokerName"]).resolve(int(e["epoch"]), int(e["end"]),
                                                   e.get("msgId", ""))
        return cmd.response(ResponseCode.SUCCESS, None, None,
                            json.dumps({"resolution": res.value}).encode())
