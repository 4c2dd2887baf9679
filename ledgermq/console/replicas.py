"""The replica-group page's data: every broker of every group polled once a second
(through the admin API's runtime info), kept as a short history, with the elections it
saw: the moments a group's master changed, or its term/epoch moved on.

A broker that stops answering stays on the page as unreachable (an operator watching a
failover wants to see the old master gone, not vanish), until it is forgotten after
`forget_s` without an answer and without a name server listing it."""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from dataclasses import dataclass, field

from ..client.admin import Admin
from .views import broker_infos

log = logging.getLogger(__name__)

MASTER_ROLES = {"LEADER", "MASTER", "ASYNC_MASTER", "SYNC_MASTER"}


@dataclass
class Replica:
    """One broker as the page shows it."""
    group: str
    addr: str
    role: str = "?"
    era: int = 0               # Raft term, or the master epoch of controller/checkpoint mode
    max_offset: int = 0        # commit-log end (bytes)
    confirmed: int | None = None  # committed / confirmed offset where the mode has one
    sync_state_set: list = field(default_factory=list)
    node: str = ""             # the mode's own name for the node (n0, broker id, ...)
    reachable: bool = True
    error: str = ""
    last_seen: float = 0.0


def read_replica(group: str, addr: str, info: dict) -> Replica:
    """A Replica from a broker's runtime info, whatever its replication mode."""
    r = Replica(group, addr, role=info.get("brokerRole", "?"),
                max_offset=int(info.get("commitLogMaxOffset", 0)),
                node=info.get("brokerId", ""))
    if "dledger" in info:
        st = json.loads(info["dledger"])
        r.era, r.confirmed, r.node = st["term"], st["committedOffset"], st["selfId"]
    elif "controller" in info:
        st = json.loads(info["controller"])
        r.era = st["masterEpoch"]
        r.sync_state_set = sorted((st.get("view") or {}).get("syncStateSet") or [])
        r.confirmed = int(info.get("dispatchedOffset", 0))
    elif "checkpoint" in info:
        st = json.loads(info["checkpoint"])
        r.era, r.node = st["epoch"], str(st.get("slot", r.node))
        r.confirmed = st.get("checkpoint")
    return r


class ReplicaWatcher:
    def __init__(self, admin: Admin, interval_s: float = 1.0, history: int = 180,
                 forget_s: float = 600.0):
        self.admin = admin
        self.interval_s = interval_s
        self.forget_s = forget_s
        self.replicas: dict[str, Replica] = {}  # by address
        self.samples: collections.deque = collections.deque(maxlen=history)
        self.elections: collections.deque = collections.deque(maxlen=50)
        self._masters: dict[str, tuple[str, int]] = {}  # group -> (master addr, era)
        self._task: asyncio.Task | None = None
        self.polled = asyncio.Event()  # set after each poll (tests and first page loads)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception as e:  # noqa: BLE001 - name servers down: keep the last view
                log.info("replica poll failed: %s", e)
            self.polled.set()
            await asyncio.sleep(self.interval_s)

    async def poll(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        listed: dict[str, str] = {}  # addr -> group, as the name servers list them
        info = await self.admin.cluster_list()
        for name, entry in info["brokerAddrTable"].items():
            for addr in entry.get("brokerAddrs", {}).values():
                listed[addr] = name
        for addr, r in list(self.replicas.items()):
            if addr not in listed and now - r.last_seen > self.forget_s:
                del self.replicas[addr]
        targets = {**{a: r.group for a, r in self.replicas.items()}, **listed}
        infos = await broker_infos(self.admin, sorted(targets))
        for addr, st in infos.items():
            if "error" in st:
                old = self.replicas.get(addr) or Replica(targets[addr], addr)
                old.reachable, old.error, old.role = False, st["error"], "UNREACHABLE"
                self.replicas[addr] = old
            else:
                r = read_replica(targets[addr], addr, st)
                r.last_seen = now
                self.replicas[addr] = r
        self._note_elections(now)
        self.samples.append({"t": now, "offsets": {a: r.max_offset for a, r in
                                                    self.replicas.items() if r.reachable}})

    def _note_elections(self, now: float) -> None:
        for group, members in self.groups().items():
            masters = [r for r in members if r.reachable and r.role in MASTER_ROLES]
            if not masters:
                continue
            m = max(masters, key=lambda r: r.era)
            before = self._masters.get(group)
            self._masters[group] = (m.addr, m.era)
            if before is not None and before != (m.addr, m.era):
                self.elections.append({"t": now, "group": group, "from": before[0],
                                       "to": m.addr, "era": m.era, "previousEra": before[1]})

    def groups(self) -> dict[str, list[Replica]]:
        out: dict[str, list[Replica]] = {}
        for r in sorted(self.replicas.values(), key=lambda r: (r.group, r.addr)):
            out.setdefault(r.group, []).append(r)
        return out

    def view(self) -> dict:
        """The page's JSON: groups with each replica's state and lag behind its master,
        the offset history for the chart, and recent elections."""
        groups = []
        for name, members in self.groups().items():
            masters = [r for r in members if r.reachable and r.role in MASTER_ROLES]
            head = max((r.max_offset for r in masters), default=None)
            rows = []
            for r in members:
                lag = None if head is None or not r.reachable else max(0, head - r.max_offset)
                rows.append({**r.__dict__, "lag": lag})
            groups.append({"group": name, "replicas": rows,
                           "master": masters[0].addr if len(masters) == 1 else None})
        return {"groups": groups, "samples": list(self.samples),
                "elections": list(self.elections)[::-1]}
