"""A checkpoint-mode (S3) broker's link to its control node: heartbeats that come back
as the group's view, and caching of sends the consistent checkpoint did not cover.

With a control node group (controlNodeAddr lists several, `a:1;b:2;c:3`) only the
group's leader answers; the others refuse naming it, and a request goes on to the leader
named, or to the next address when a node is down, within the request's time."""
from __future__ import annotations

import json
import logging
import time

from ..peer_auth.core import PeerAuth
from ..peer_auth.remoting import PeerGate
from ..remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..replication.checkpoint import Resolution, View

log = logging.getLogger(__name__)

# the sender waits checkpointSyncTimeoutMillis, then this for the control node: together
# they stay below RocketMQ clients' 3 s send timeout (the control node answers in ms)
CACHE_TIMEOUT_S = 1.0
UNREACHABLE_WARN_EVERY_S = 5.0  # one line for a burst of sends, not one for each


def control_node_addrs(text: str) -> list[str]:
    """controlNodeAddr's addresses: one control node, or each node of a group."""
    addrs = [a.strip() for a in text.split(";") if a.strip()]
    for a in addrs:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"controlNodeAddr item {a!r} is not host:port")
    if not addrs:
        raise ValueError("controlNodeAddr is empty")
    return addrs


class ControlNodeClient:
    def __init__(self, addr: str, group: str, auth: PeerAuth | None = None,
                 ssl_context=None):
        """`addr`: controlNodeAddr; `auth`: the cluster secret, proven on each connection
        to a control node; `ssl_context`: TLS to it (tls.enable)."""
        self.addrs, self.group = control_node_addrs(addr), group
        self._at = 0  # the address answered last (the group's leader, as far as we know)
        self._warned_at, self._unwarned = float("-inf"), 0
        self.client = RemotingClient(
            authenticate=PeerGate(auth or PeerAuth(), "control node link").authenticate,
            ssl_context=ssl_context)

    @property
    def addr(self) -> str:
        return self.addrs[self._at]

    async def _invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """`cmd` answered by the control node, or by the group's leader: a node that is
        down or not leading sends it on to the next (at most a round of them)."""
        deadline = time.monotonic() + timeout_s
        each = timeout_s if len(self.addrs) == 1 else max(timeout_s / 2, 0.2)
        attempts = 1 if len(self.addrs) == 1 else 2 * len(self.addrs)
        for tried in range(1, attempts + 1):
            left = deadline - time.monotonic()
            try:
                r = await self.client.invoke(self.addr, cmd, max(0.01, min(each, left)))
            except RemotingError:
                if tried >= attempts or deadline - time.monotonic() <= 0:
                    raise
                self._at = (self._at + 1) % len(self.addrs)
                continue
            if r.code != ResponseCode.CONTROLLER_NOT_LEADER or len(self.addrs) == 1 \
                    or deadline - time.monotonic() <= 0:
                return r
            hint = (r.ext or {}).get("leaderAddr", "")
            self._at = self.addrs.index(hint) if hint in self.addrs and hint != self.addr \
                else (self._at + 1) % len(self.addrs)
        return r

    async def heartbeat(self, ext: dict[str, str]) -> View:
        r = await self._invoke(RemotingCommand(
            RequestCode.CONTROL_HEARTBEAT, ext={"brokerName": self.group, **ext}), 3.0)
        if r.code != ResponseCode.SUCCESS:
            raise RemotingError(f"control node refused the heartbeat: {r.remark}")
        d = json.loads(r.body)
        return View(d["epoch"], d["role"], d["slot"], d["masterAddr"], d["checkpoint"],
                    tuple(tuple(m) for m in d["members"]), d["truncateTo"],
                    d.get("membersVersion", 0))

    async def cache(self, epoch: int, offset: int, end: int, msg_id: str, data: bytes) -> bool:
        """S3-3: hand a message whose sync timed out to the control node."""
        try:
            r = await self._invoke(RemotingCommand(
                RequestCode.CONTROL_CACHE, ext={
                    "brokerName": self.group, "epoch": str(epoch), "offset": str(offset),
                    "end": str(end), "msgId": msg_id}, body=data), CACHE_TIMEOUT_S)
        except RemotingError as e:
            self._warn_unreachable("caching", e)
            return False
        return r.code == ResponseCode.SUCCESS

    async def resolve(self, epoch: int, end: int, msg_id: str, timeout_s: float) -> Resolution:
        """S3-4 for a PENDING send of ours: DONE, RESEND, or UNKNOWN (also when the control
        node does not answer within `timeout_s`)."""
        try:
            r = await self._invoke(RemotingCommand(
                RequestCode.CONTROL_RESOLVE, ext={
                    "brokerName": self.group, "epoch": str(epoch), "end": str(end),
                    "msgId": msg_id}), timeout_s)
            if r.code == ResponseCode.SUCCESS:
                return Resolution(json.loads(r.body or b"{}").get("resolution", "UNKNOWN"))
            log.warning("control node refused to resolve %s: %s", msg_id, r.remark)
        except RemotingError as e:
            log.debug("control node unreachable for resolving %s: %s", msg_id, e)
        except ValueError as e:  # not an answer we know
            log.warning("control node's answer for %s unreadable: %s", msg_id, e)
        return Resolution.UNKNOWN

    async def hand_over(self, ha_addr: str, epoch: int, prefer_slot: int) -> str | None:
        """This master gives the group up (its clients cannot reach it): the control node
        fails over now, to `prefer_slot` if it may take over. Why not, or None."""
        r = await self._invoke(RemotingCommand(
            RequestCode.CONTROL_HAND_OVER, ext={
                "brokerName": self.group, "haAddr": ha_addr, "epoch": str(epoch),
                "preferSlot": str(prefer_slot)}), 3.0)
        return None if r.code == ResponseCode.SUCCESS else r.remark or f"code {r.code}"

    def _warn_unreachable(self, what: str, e: Exception) -> None:
        """A warning for the first failure, then at most one each few seconds with the
        count: a down control node fails every send's request."""
        self._unwarned += 1
        now = time.monotonic()
        if now - self._warned_at >= UNREACHABLE_WARN_EVERY_S:
            log.warning("control node unreachable for %s: %s (%d request(s) since the last "
                        "such warning)", what, e, self._unwarned)
            self._warned_at, self._unwarned = now, 0

    async def close(self) -> None:
        await self.client.close()
