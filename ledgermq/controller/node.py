"""A controller node (S1-1): the metadata state machine behind a Raft replica, sans-IO.

Commands are proposed through Raft; every node applies committed entries in log order, so
all hold the same metadata. Only the leader watches broker heartbeats (in memory, as the
active controller does), with what each broker last reported (liveness.py): when a
group's master has been silent for `heartbeat_timeout_ms`, it proposes an ElectMaster
naming the brokers it still hears, most up-to-date first.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..replication.raft import Code, Complete, RaftConfig, RaftNode, Role, SaveCommit
from .liveness import BrokerReport, elect_order
from .metadata import ControllerMetadata, ElectMaster, Result, decode_command, encode_command


@dataclass(frozen=True)
class Answer:
    """The outcome of a proposed command, once applied (or refused by Raft)."""

    request_id: int
    result: Result


@dataclass(frozen=True)
class Applied:
    """A committed command this node applied (for observers: checkers, metrics)."""

    index: int
    command: object
    result: Result


class ControllerNode:
    def __init__(self, node_id: str, peers: list[str], config: RaftConfig | None = None, *,
                 log=None, term: int = 0, voted_for: str | None = None, commit: int = -1,
                 rng: random.Random | None = None, now: int = 0,
                 heartbeat_timeout_ms: int = 3000, unclean: bool = False,
                 bug: str | None = None):
        self.raft = RaftNode(node_id, peers, config, term=term, voted_for=voted_for, log=log,
                             commit=commit, rng=rng, now=now)
        self.metadata = ControllerMetadata(bug)
        self.applied = -1
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.unclean = unclean
        self.heard: dict[tuple[str, int], int] = {}  # (group, broker id) -> last heartbeat
        self.reports: dict[tuple[str, int], BrokerReport] = {}  # what that heartbeat said
        self.leader_since: int | None = None
        self._results: dict[int, Result] = {}  # recent entries' outcomes, by index
        self._next_internal = -1  # ids of the leader's own proposals (negative)
        self._electing: dict[str, int] = {}  # group -> when we proposed an election
        self._replay_to = commit  # metadata lives in memory: a restart re-applies the log

    @property
    def is_leader(self) -> bool:
        return self.raft.role is Role.LEADER

    # ---- inputs -----------------------------------------------------------------------
    def step(self, msg, now: int) -> list:
        return self._process(self.raft.step(msg, now), now)

    def propose(self, request_id: int, cmd, now: int) -> list:
        return self._process(self.raft.propose(request_id, encode_command(cmd), now), now)

    def broker_heartbeat(self, group: str, broker_id: int, now: int,
                         report: BrokerReport | None = None) -> None:
        self.heard[(group, broker_id)] = now
        if report is not None:
            self.reports[(group, broker_id)] = report

    def candidates(self, group: str, now: int) -> tuple[int, ...]:
        """The group's brokers heard within the timeout, the best to elect first."""
        alive = [b for (g, b), t in self.heard.items()
                 if g == group and now - t < self.heartbeat_timeout_ms]
        return elect_order(alive, {b: r for (g, b), r in self.reports.items() if g == group})

    def tick(self, now: int) -> list:
        out = self._process(self.raft.tick(now), now)
        if not self.is_leader:
            self.leader_since = None
            return out
        if self.leader_since is None:
            self.leader_since = now  # give brokers a timeout to reach a new leader
        if now - self.leader_since < self.heartbeat_timeout_ms:
            return out
        for name, g in self.metadata.groups.items():
            if g.master is None or now - self.heard.get((name, g.master), -1 << 60) < \
                    self.heartbeat_timeout_ms:
                continue
            if now - self._electing.get(name, -1 << 60) < self.heartbeat_timeout_ms:
                continue  # one proposal at a time per group
            alive = tuple(b for b in self.candidates(name, now) if b in g.brokers)
            self._electing[name] = now
            rid = self._next_internal
            self._next_internal -= 1
            out += self.propose(rid, ElectMaster(name, alive, unclean=self.unclean), now)
        return out

    # ---- applying ---------------------------------------------------------------------
    def _process(self, actions: list, now: int) -> list:
        out = []
        if self._replay_to > self.applied:
            out += self._apply_to(min(self._replay_to, self.raft.log.end))
            self._replay_to = -1
        for a in actions:
            if isinstance(a, SaveCommit):
                out.append(a)
                out += self._apply_to(a.index)
            elif isinstance(a, Complete):
                if a.request_id < 0:  # the leader's own election proposals
                    out += self._apply_to(a.index) if a.code is Code.SUCCESS else []
                elif a.code is Code.SUCCESS:
                    out += self._apply_to(a.index)
                    out.append(Answer(a.request_id, self._results.get(a.index, Result(
                        False, "committed, but its outcome is no longer known"))))
                else:
                    out.append(Answer(a.request_id, Result(False, a.code.value)))
            else:
                out.append(a)
        return out

    def _apply_to(self, index: int) -> list:
        out = []
        while self.applied < index:
            e = self.raft.log.entry(self.applied + 1)
            self.applied += 1
            if e is None or not e.data:
                continue  # a new leader's empty entry
            cmd = decode_command(e.data)
            result = self.metadata.apply(cmd)
            self._results[e.index] = result
            if len(self._results) > 1024:
                self._results.pop(next(iter(self._results)))
            out.append(Applied(e.index, cmd, result))
        return out
