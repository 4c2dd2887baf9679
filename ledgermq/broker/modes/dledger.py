"""DLedger mode (S0): the commit log is a Raft log. The leader is the master; a write is
acknowledged once a quorum holds it, and consumers see only committed messages."""
from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

from ...drivers.dledger import DLedgerDriver, parse_peers
from ...remoting import RequestCode
from ...replication.raft import Code, Complete, RaftConfig, Role
from ...store import PutResult, PutStatus
from ...wire.batch import EncodedBatch
from .base import Later, ModeHost, StandaloneMode
from .client_handover import ClientHandOver, GroupRole
from .disk_handover import FullDiskHandOver
from .protocol import Metric

if TYPE_CHECKING:
    from ...remoting.transport import Handler


TARGET_HELD_S = 5.0  # how long a hand-over's follower stays the target while it catches up


class DLedgerMode(StandaloneMode):
    name = "dledger"

    def __init__(self, host: ModeHost) -> None:
        super().__init__(host)
        self.driver: DLedgerDriver | None = None
        self.role_changes = 0
        self.elections_won = 0
        self.hand_over = ClientHandOver(host, self.name, self._group_role, self._hand_to)
        self.full_disk = FullDiskHandOver(host, self.name, self._group_role, self._hand_to,
                                          self.replica_offsets)
        self._target: tuple[str, float] | None = None  # a hand-over's (follower, until)

    @property
    def is_writable(self) -> bool:
        return self.driver is not None and self.driver.is_leader

    @property
    def is_slave(self) -> bool:
        return not self.is_writable

    @property
    def broker_id(self) -> int:
        """The leader is the master (0); followers are slaves by their place in the peers."""
        if self.is_writable:
            return 0
        assert self.driver is not None  # set by prepare(), before the broker serves
        return 1 + sorted(self.driver.peers).index(self.config.dLegerSelfId)

    def refuse_write(self) -> str | None:
        d = self.driver
        assert d is not None
        if d.is_leader:
            return None
        return f"{d.self_id} is not the DLedger leader (leader: {d.node.leader})"

    def _append(self,
                encoded: EncodedBatch) -> tuple[PutResult, asyncio.Future[Complete] | None]:
        """Append locally; the batch's bytes (with any end-of-segment filler before them)
        become one Raft entry. Returns the result and a future of the entry's Complete."""
        start = self.store.commitlog.max_offset
        result = self.store.append(encoded)
        if not result.ok:
            return result, None
        assert self.driver is not None
        return result, self.driver.propose_range(start, result.end_offset)

    def write(self, encoded: EncodedBatch) -> PutResult | Later:
        result, fut = self._append(encoded)
        if fut is None:
            return result
        return Later(fut, lambda done: self._committed(result, done))

    @staticmethod
    def _committed(result: PutResult, done: Complete) -> PutResult:
        if done.code is Code.WAIT_QUORUM_ACK_TIMEOUT:
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            result.error = "no quorum acknowledged the batch in time"
        elif done.code is not Code.SUCCESS:
            result.status = PutStatus.SERVICE_NOT_AVAILABLE
            result.error = f"{done.code.value}: leadership changed before the batch committed"
        return result

    def write_internal(self, encoded: EncodedBatch) -> PutResult:
        """Fire and forget: a batch lost with a leadership change is written again by the
        next leader (delayed delivery resumes from its saved offsets)."""
        result, fut = self._append(encoded)
        if fut is not None and fut.done() and fut.result().code is not Code.SUCCESS:
            result.status = PutStatus.SERVICE_NOT_AVAILABLE
        return result

    def metrics(self) -> list[Metric]:
        assert self.driver is not None
        st = self.driver.status()
        return super().metrics() + [
            ("ledgermq_raft_term", "Raft term this node is in.", {}, st["term"]),
            ("ledgermq_raft_commit_index", "Highest committed Raft index.", {}, st["commit"]),
            ("ledgermq_raft_role", "1 for this node's Raft role.", {"role": st["role"]}, 1),
            ("ledgermq_raft_role_changes_total", "Raft role changes of this node.", {},
             self.role_changes),
            ("ledgermq_raft_elections_won_total", "Times this node became the leader.", {},
             self.elections_won),
            *self.hand_over.metrics(), *self.full_disk.metrics()]

    def handlers(self) -> dict[int, Handler]:
        # (looked up at each request: tests list a mode's codes on an instance not set up)
        return {RequestCode.REPORT_MASTER_UNREACHABLE:
                lambda cmd, conn: self.hand_over.client_report(cmd, conn),
                RequestCode.CLIENTS_CANNOT_REACH_LEADER:
                lambda cmd, conn: self.hand_over.follower_report(cmd, conn)}

    def replica_offsets(self) -> dict[str, int]:
        """On the leader: each follower's match index, as a commit-log offset."""
        d = self.driver
        if d is None or not d.is_leader:
            return {}
        node, log = d.node, d.log
        marks = node.watermarks.get(node.term, {})
        return {p: log.log_end - log.bytes_after(marks.get(p, -1)) for p in node.peers}

    def runtime_info(self) -> dict[str, str]:
        assert self.driver is not None
        return {"brokerRole": "LEADER" if self.is_writable else "FOLLOWER",
                "brokerId": str(self.broker_id), "dledger": json.dumps(self.driver.status())}

    async def prepare(self) -> None:
        """The Raft peer port and log, before the broker serves clients."""
        c = self.config
        self.driver = DLedgerDriver(
            self.store, c.dLegerSelfId, parse_peers(c.dLegerPeers),
            self.store.config.root / "dledger", self._role_changed,
            RaftConfig(election_timeout_ms=c.dLegerElectionTimeoutMs,
                       heartbeat_ms=c.dLegerHeartBeatIntervalMs,
                       max_pending_size=c.dLegerMaxPendingSize,
                       max_push_timeout_ms=c.dLegerMaxPushTimeOutMs,
                       quorum_ack_timeout_ms=c.dLegerQuorumAckTimeoutMs),
            preferred_leader=lambda: c.preferredLeaderId or self._hand_over_target(),
            auth=self.auth, tls=c.tls)
        await self.driver.start()
        self.full_disk.start()

    # ---- a hand-over on clients' reports (client_handover.py) --------------------------
    def _group_role(self) -> GroupRole | None:
        d = self.driver
        if d is None:
            return None
        return GroupRole(d.is_leader, d.self_id, frozenset(d.peers) - {d.self_id})

    def _hand_to(self, follower: str) -> str | None:
        """Leadership moves to `follower` once it has caught up (the driver's preferred
        leader for TARGET_HELD_S), unless an operator chose the leader."""
        if self.config.preferredLeaderId:
            return f"the operator's preferredLeaderId ({self.config.preferredLeaderId}) decides"
        self._target = (follower, time.monotonic() + TARGET_HELD_S)
        return None

    def _hand_over_target(self) -> str:
        if self._target is None or time.monotonic() > self._target[1]:
            self._target = None
            return ""
        return self._target[0]

    def _role_changed(self, role: Role) -> None:
        self.role_changes += 1
        self.elections_won += role is Role.LEADER
        asyncio.get_running_loop().create_task(self.host.role_changed())

    async def stop(self) -> None:
        await self.hand_over.stop()
        await self.full_disk.stop()
        if self.driver is not None:
            await self.driver.stop()
