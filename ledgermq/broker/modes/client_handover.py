"""A master its clients cannot reach hands the group to a follower they can (DLedger,
controller and checkpoint mode).

A partition may cut a master off from its producers while it keeps its peers. Raft, the
controller or the control node then sees a healthy master, and every send waits for the
heal. ledgermq's client notices when a group's master owes it answers, has sent nothing
for a second, and the route still names it. It then tells the group's other brokers
(REPORT_MASTER_UNREACHABLE). A follower passes the word on to its master
(CLIENTS_CANNOT_REACH_LEADER, a peer request that needs the cluster secret when one is
set). The master hands over to that follower only when:
- no client has brought it a byte for `clientQuietMillis`. A master that clients still
  reach stays put, so a hostile report cannot move a busy master; a report that comes
  sooner is decided again once that much quiet will have passed;
- it has not handed over in the last HAND_OVER_EVERY_S;
- the follower may take over (a Raft peer; a SyncStateSet member in controller mode; a
  checkpoint member in checkpoint mode);
- its mode agrees (DLedger: no operator has set preferredLeaderId, which would move
  leadership straight back).
How it hands over is the mode's: a DLedger leader transfers leadership, a controller-mode
master asks the controller to elect the follower (as an operator's electMaster would), a
checkpoint-mode master asks the control node to fail over now (CONTROL_HAND_OVER).
RocketMQ's own clients send no such report: they wait for the heal, as they do on RocketMQ."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ...peer_auth.remoting import PeerGate
from ...remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode
from .protocol import Metric

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from .base import ModeHost

log = logging.getLogger(__name__)

HAND_OVER_EVERY_S = 30.0  # at most one hand-over on client reports per master in this time
PASS_ON_EVERY_S = 1.0  # a follower passes reports on at most this often
PASS_ON_TIMEOUT_S = 2.0
LOOK_MARGIN_S = 0.05  # a look again comes this much after the quiet would have lasted


def last_heard(conn: Any) -> float | None:
    """When a client connection last brought a byte (monotonic); None for a connection that
    is not a client's (a follower's copy of the topics, an admin tool). Remoting connections
    become a client's with a heartbeat or a send; a gRPC channel is a client's."""
    if hasattr(conn, "last_seen"):  # a RocketMQ 5 (gRPC) client
        return float(conn.last_seen)
    if conn.attrs.get("client_id") or conn.attrs.get("born_host"):
        return float(conn.last_active)
    return None


@dataclass(frozen=True)
class GroupRole:
    """What a hand-over asks of its mode: whether this broker is the group's master, its
    id in the group, and the ids of the followers that may take over from it."""
    is_master: bool
    self_id: str
    successors: frozenset[str]


class ClientHandOver:
    def __init__(self, host: ModeHost, mode: str, role: Callable[[], GroupRole | None],
                 hand_to: Callable[[str], str | None]):
        """`role`: this broker's, None while it has none yet; `hand_to`: start handing the
        group to a follower, or say why the mode will not."""
        self.host = host  # its client connections; the master's address (name servers)
        self.config = host.config
        self.mode = mode
        self._role, self._hand_to = role, hand_to
        self.client = RemotingClient(
            authenticate=PeerGate(host.peer_auth, f"{mode} hand-over").authenticate,
            ssl_context=host.config.tls.client)
        self._handed_over_at = float("-inf")
        self._passed_on_at = float("-inf")
        self._look: asyncio.TimerHandle | None = None  # a report's decision, taken again
        self._tasks: set[asyncio.Task[None]] = set()
        self.reports = 0  # clients' reports heard (as a follower)
        self.hand_overs = 0  # hand-overs started (as the master)

    def metrics(self) -> list[Metric]:
        return [(f"ledgermq_{self.mode}_client_reports_total", "Clients' reports that they "
                 "cannot reach this group's master, heard by this follower.", {},
                 self.reports),
                (f"ledgermq_{self.mode}_client_hand_overs_total", "Times this master handed "
                 "over because no client reached it and a follower's clients could not.", {},
                 self.hand_overs)]

    # ---- on a follower: a client cannot reach the leader -----------------------------
    def client_report(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        name = cmd.ext.get("brokerName")
        if name != self.config.brokerName:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"this broker is in group {self.config.brokerName}, "
                                f"not {str(name)[:64]!r}")
        d = self._role()
        if d is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "this broker has no role yet")
        if d.is_master:
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
        if name != self.config.brokerName:
            why: str | None = f"this broker is in group {self.config.brokerName}, " \
                f"not {str(name)[:64]!r}"
        else:
            why = self._hand_over_now(follower)
            if why is not None and self._refusal(follower) is None and self._quiet_left() > 0:
                # all holds but the quiet: look again once it will have lasted, rather than
                # wait for a next report (clients report a second apart, a follower passes
                # one on at most once a second: the moment could pass by seconds)
                self._look_again(follower)
        if why is not None:
            log.info("clients of follower %s cannot reach this master; not handing over: %s",
                     follower[:64], why)
            return cmd.response(ResponseCode.SUCCESS, why, {"handingOver": "false"})
        return cmd.response(ResponseCode.SUCCESS, f"handing the group to {follower}",
                            {"handingOver": "true"})

    def _hand_over_now(self, follower: str) -> str | None:
        """Start handing the group to `follower` if every condition holds (None), else
        why not."""
        why = self._why_not(follower)
        if why is None:
            why = self._hand_to(follower)
        if why is None:
            now = time.monotonic()
            self._handed_over_at = now
            self.hand_overs += 1
            log.warning("%s %s: no client has reached this master for %.1f s and clients of "
                        "follower %s cannot reach it: handing the group to %s", self.mode,
                        self.config.brokerName, self._quiet_s(now), follower, follower)
        return why

    def _look_again(self, follower: str) -> None:
        """Decide again once no client will have reached this master for
        clientQuietMillis (one look pending at a time; a client that comes meanwhile keeps
        it, as it would have at a report)."""
        if self._look is not None:
            return
        left = self._quiet_left()

        def look() -> None:
            self._look = None
            why = self._hand_over_now(follower)
            if why is not None:
                log.info("looked again at follower %s's report; not handing over: %s",
                         follower[:64], why)
        self._look = asyncio.get_running_loop().call_later(max(0.0, left) + LOOK_MARGIN_S,
                                                           look)

    def _why_not(self, follower: str) -> str | None:
        why = self._refusal(follower)
        quiet = self._quiet_s(time.monotonic())
        if why is None and quiet < self.config.clientQuietMillis / 1000:
            why = f"a client reached this leader {quiet:.1f} s ago"
        return why

    def _quiet_left(self) -> float:
        """Seconds until no client will have reached this master for clientQuietMillis."""
        return self.config.clientQuietMillis / 1000 - self._quiet_s(time.monotonic())

    def _refusal(self, follower: str) -> str | None:
        """Why not hand over to `follower`, however long the clients have been quiet."""
        d, c = self._role(), self.config
        if d is None or not d.is_master:
            return "this broker is not the leader"
        if follower not in d.successors:
            return f"{follower[:64]!r} is not a follower of this group that may take over"
        if not c.handOverOnClientReports:
            return "handOverOnClientReports is off on the master"
        now = time.monotonic()
        if now - self._handed_over_at < HAND_OVER_EVERY_S:
            return f"this master handed over {now - self._handed_over_at:.1f} s ago"
        return None

    def _quiet_s(self, now: float) -> float:
        """Seconds since a client last brought this broker a byte or closed its connection
        (inf: none ever did). A goodbye counts: a client that closed after a slow answer
        reached this master, whatever report of it a follower passes on late (CI saw a
        checkpoint master with frozen slaves hand over on one, after its client left)."""
        heard = [t for conn in self.host.client_connections()
                 if (t := last_heard(conn)) is not None]
        return now - max([*heard, self.host.client_left_at])

    async def stop(self) -> None:
        if self._look is not None:
            self._look.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.close()
