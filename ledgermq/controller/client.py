"""Talking to a controller group: try each address (`controllerAddr`, semicolon list)
until the leader answers, and remember it. Used by brokers and by `ledgermq admin`."""
from __future__ import annotations

import json

from ..peer_auth.core import PeerAuth
from ..peer_auth.remoting import PeerGate
from ..remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode


class ControllerError(RemotingError):
    """The controller group refused a request, or no leader could be reached."""


class ControllerRefused(ControllerError):
    """The leader answered with a refusal (no leader reached: a plain ControllerError)."""


class ControllerClient:
    """`auth`: the cluster secret, proven on each connection (a controller with one serves
    registrations, heartbeats, elections and SyncStateSet changes to no one else);
    `ssl_context`: TLS to the controllers (a broker's tls.enable, the CLI's --tls)."""

    def __init__(self, addresses: str | list[str], timeout: float = 3.0,
                 auth: PeerAuth | None = None, ssl_context=None):
        if isinstance(addresses, str):
            addresses = [a.strip() for a in addresses.split(";") if a.strip()]
        if not addresses:
            raise ValueError("no controller address (controllerAddr)")
        self.addresses = list(addresses)
        self.timeout = timeout
        self.client = RemotingClient(
            authenticate=PeerGate(auth or PeerAuth(), "controller link").authenticate,
            ssl_context=ssl_context)
        self.leader: str | None = None

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def invoke(self, code: int, ext: dict | None = None, body: bytes = b"",
                     *, any_node: bool = False) -> RemotingCommand:
        """The leader's answer (or any node's, for any_node requests). Raises
        ControllerError with the controller's remark when refused."""
        order = ([self.leader] if self.leader else []) + \
            [a for a in self.addresses if a != self.leader]
        problems = []
        for addr in order:
            try:
                r = await self.client.invoke(addr, RemotingCommand(code, ext=ext or {},
                                                                   body=body), self.timeout)
            except RemotingError as e:
                problems.append(f"{addr}: {e}")
                continue
            if r.code == ResponseCode.CONTROLLER_NOT_LEADER and not any_node:
                problems.append(f"{addr}: {r.remark}")
                continue
            if r.code != ResponseCode.SUCCESS:
                raise ControllerRefused(r.remark or f"controller answered code {r.code}")
            self.leader = addr if not any_node else self.leader
            return r
        self.leader = None
        raise ControllerError("no controller leader answered: " + "; ".join(problems))

    async def call(self, code: int, ext: dict | None = None, body=None, **kw) -> dict:
        raw = b"" if body is None else json.dumps(body).encode()
        r = await self.invoke(code, {k: str(v) for k, v in (ext or {}).items()}, raw, **kw)
        return json.loads(r.body) if r.body else {}

    # ---- the admin's requests -------------------------------------------------------
    async def sync_state_set(self, groups: list[str] = ()) -> dict:
        return await self.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=list(groups))

    async def metadata(self) -> list[dict]:
        """Every controller node's view of the group (the ones that answer)."""
        out = []
        for addr in self.addresses:
            try:
                r = await self.client.invoke(addr, RemotingCommand(
                    RequestCode.CONTROLLER_GET_METADATA_INFO), self.timeout)
                out.append({"address": addr, **json.loads(r.body)})
            except (RemotingError, ValueError) as e:
                out.append({"address": addr, "error": str(e)})
        return out

    async def config(self) -> dict:
        return await self.call(RequestCode.GET_CONTROLLER_CONFIG, any_node=True)

    async def elect_master(self, group: str, broker_id: int | None = None) -> dict:
        ext = {"brokerName": group, "operator": "true"}
        if broker_id is not None:
            ext["brokerId"] = broker_id
        return await self.call(RequestCode.CONTROLLER_ELECT_MASTER, ext)

    async def clean_broker_metadata(self, group: str, broker_ids: list[int] = ()) -> dict:
        return await self.call(RequestCode.CLEAN_BROKER_DATA, {
            "brokerName": group, "brokerIds": ";".join(map(str, broker_ids))})
