"""DLedger: a leader its clients cannot reach hands leadership to a follower they can.

A partition may cut a leader off from its producers while it keeps its peers. Raft then
sees a healthy leader, and every send waits for the heal. ledgermq's client notices when a
group's master owes it answers, has sent nothing for a second, and the route still names it.
It then tells the group's other brokers (REPORT_MASTER_UNREACHABLE). A follower passes the
word on to its leader (CLIENTS_CANNOT_REACH_LEADER, a peer request that needs the cluster
secret when one is set). The leader hands over to that follower only when:
- no client has brought it a byte for `clientQuietMillis`. A leader that clients still
  reach stays put, so a hostile report cannot move a busy leader;
- it has not handed over in the last HAND_OVER_EVERY_S;
- no operator has set preferredLeaderId (that choice would move leadership straight back).
RocketMQ's own clients send no such report: they wait for the heal, as they do on RocketMQ."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from ...peer_auth.remoting import PeerGate
from ...remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode

if TYPE_CHECKING:
    from ...drivers.dledger import DLedgerDriver
    from ...remoting.transport import Connection
    from .base import ModeHost

log = logging.getLogger(__name__)

HAND_OVER_EVERY_S = 30.0  # at most one hand-over on client reports per leader in this time
TARGET_HELD_S = 5.0  # how long the chosen follower stays the target while it catches up
PASS_ON_EVERY_S = 1.0  # a follower passes reports on at most this often
PASS_ON_TIMEOUT_S = 2.0


def last_heard(conn: Any) -> float | None:
    """When a client connection last brought a byte (monotonic); None for a connection that
    is not a client's (a follower's copy of the topics, an admin tool). Remoting connections
    become a client's with a heartbeat or a send; a gRPC channel is a client's."""
    if hasattr(conn, "last_seen"):  # a RocketMQ 5 (gRPC) client
        return float(conn.last_seen)
    if conn.attrs.get("client_id") or conn.attrs.get("born_host"):
        return float(conn.last_active)
    return None


class ClientHandOver:
    def __init__(self, host: ModeHost, driver: Callable[[], DLedgerDriver | None]):
        self.host = host  # its client connections; the leader's address (name servers)
        self.config = host.config
        self._driver = driver
        self.client = RemotingClient(
            authenticate=PeerGate(host.peer_auth, "dledger hand-over").authenticate,
            ssl_context=host.config.tls.client)
        self._target: tuple[str, float] | None = None  # (follower, until) on the leader
        self._handed_over_at = float("-inf")
        self._passed_on_at = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()
        self.reports = 0  # clients' reports heard (as a follower)
        self.hand_overs = 0  # hand-overs started (as the leader)

    def target(self) -> str:
        """The follower this leader is handing over to, or "" (the driver's preferred
        leader, when no operator set one)."""
        if self._target is None or time.monotonic() > self._target[1]:
            self._target = None
            return ""
        return self._target[0]

    # ---- on a follower: a client cannot reach the leader -----------------------------
    def client_report(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = cmd.ext.get("brokerName")
        if name != self.config.brokerName:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"this broker is in group {self.config.brokerName}, "
                                f"not {str(name)[:64]!r}")
        d = self._driver()
        if d is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "this broker is starting")
        if d.is_leader:
            return cmd.response(ResponseCode.SUCCESS,
                                f"this broker leads {name} now: fetch the route again")
        self.reports += 1
        if not self.config.handOverOnClientReports:
            return cmd.response(ResponseCode.SUCCESS,
                                "handOverOnClientReports is off on this broker")
        now = time.monotonic()
        if now - self._passed_on_at < PASS_ON_EVERY_S:
            return cmd.response(ResponseCode.SUCCESS, "passed on to the leader already")
        self._passed_on_at = now
        reported = str(cmd.ext.get("masterAddr", ""))[:64]
        task = asyncio.get_running_loop().create_task(self._pass_on(d.self_id, reported))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return cmd.response(ResponseCode.SUCCESS, "passing it on to the leader")

    async def _pass_on(self, self_id: str, reported: str) -> None:
        """To the leader the name servers name, unless the client's report named another:
        its route is older than the last election, and the leader it missed is gone."""
        addr = await self.host.master_address()
        if not addr or (reported and addr != reported):
            log.info("a client cannot reach %s's leader %s; the name servers name %s",
                     self.config.brokerName, reported or "?", addr or "none")
            return
        try:
            r = await self.client.invoke(addr, RemotingCommand(
                RequestCode.CLIENTS_CANNOT_REACH_LEADER,
                ext={"brokerName": self.config.brokerName, "follower": self_id}),
                PASS_ON_TIMEOUT_S)
        except RemotingError as e:
            log.info("a client cannot reach %s's leader at %s, nor can this follower: %s",
                     self.config.brokerName, addr, e)
            return
        log.info("a client cannot reach %s's leader at %s; it answered: %s",
                 self.config.brokerName, addr, r.remark)

    # ---- on the leader: a follower's clients cannot reach it -------------------------
    def follower_report(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        follower = str(cmd.ext.get("follower", ""))
        name = cmd.ext.get("brokerName")
        why = self._why_not(follower) if name == self.config.brokerName else \
            f"this broker is in group {self.config.brokerName}, not {str(name)[:64]!r}"
        if why is not None:
            log.info("clients of follower %s cannot reach this leader; not handing over: %s",
                     follower[:64], why)
            return cmd.response(ResponseCode.SUCCESS, why, {"handingOver": "false"})
        now = time.monotonic()
        self._handed_over_at = now
        self._target = (follower, now + TARGET_HELD_S)
        self.hand_overs += 1
        log.warning("dledger %s: no client has reached this leader for %.1f s and clients of "
                    "follower %s cannot reach it: handing leadership to %s",
                    self.config.dLegerSelfId, self._quiet_s(now), follower, follower)
        return cmd.response(ResponseCode.SUCCESS, f"handing leadership to {follower}",
                            {"handingOver": "true"})

    def _why_not(self, follower: str) -> str | None:
        d, c = self._driver(), self.config
        if d is None or not d.is_leader:
            return "this broker is not the leader"
        if follower not in d.peers or follower == d.self_id:
            return f"{follower[:64]!r} is not a follower of this group"
        if not c.handOverOnClientReports:
            return "handOverOnClientReports is off on the leader"
        if c.preferredLeaderId:
            return f"the operator's preferredLeaderId ({c.preferredLeaderId}) decides"
        now = time.monotonic()
        if now - self._handed_over_at < HAND_OVER_EVERY_S:
            return f"this leader handed over {now - self._handed_over_at:.1f} s ago"
        quiet = self._quiet_s(now)
        if quiet < c.clientQuietMillis / 1000:
            return f"a client reached this leader {quiet:.1f} s ago"
        return None

    def _quiet_s(self, now: float) -> float:
        """Seconds since a client last brought this broker a byte (inf: none connected)."""
        heard = [t for conn in self.host.client_connections() if (t := last_heard(conn)) is not None]
        return now - max(heard) if heard else float("inf")

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.close()
