"""Controller mode (S1) end to end in the simulator: three ControllerNodes (Raft + the
metadata state machine, as ControllerSim) and three brokers running the real
AutoSwitchMaster / AutoSwitchSlave / SyncStateTracker cores. Brokers register,
heartbeat, ask for elections and SyncStateSet changes over a faulty network; producers
send to whoever is master; brokers, controllers and links fail and come back; a broker
may crash between cutting its log and cutting its epoch file.

Checked after every step, besides the controller group's own invariants:
- every send acknowledged under the SyncStateSet rule (allAckInSyncStateSet) is in a new
  master's log, at the same offset, when it starts to serve;
- after the handshake truncation a slave's log is a prefix of its master's;
- epoch files agree on every epoch two brokers share;
- after the faults heal, a master serves and sends are acknowledged again.

A broker's log survives its crash (SYNC_FLUSH-like: it reports only what it wrote).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..controller import AlterSyncStateSet, Answer, ElectMaster, RegisterBroker
from ..controller.metadata import STALE_SET_EPOCH
from ..controller import BUGS as CONTROLLER_BUGS
from ..replication.autoswitch import BUGS as AUTOSWITCH_BUGS
from ..replication.autoswitch.sync_state import ProposeSyncStateSet, SyncConfig, SyncStateTracker
from ..replication.autoswitch.transfer import (
    AutoSwitchMaster, AutoSwitchSlave, Confirmed, EpochTransfer, RecordEpoch, SendEpochs,
    SendHandshake, TruncateLog,
)
from ..replication.ha import (
    Append, Close, Complete, Connect, Disconnect, HAConfig, Report, StartAt, SyncStatus,
)
from .controller import GROUP, ControllerSim
from .ha import SimLog
from .links import Links
from .world import SimResult, Violation

BUGS = {**CONTROLLER_BUGS, **AUTOSWITCH_BUGS}
TICK_MS = 10
HEARTBEAT_MS = 60  # broker -> controller
NOT_ACTIVE_MS = 600  # the controller's brokerNotActiveTimeoutMillis


@dataclass
class Broker:
    name: str
    log: SimLog = field(default_factory=SimLog)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # the EpochFile
    alive: bool = True
    broker_id: int | None = None
    role: str = "NONE"
    master_epoch: int = -1
    view: dict = field(default_factory=dict)
    master: AutoSwitchMaster | None = None
    slave: AutoSwitchSlave | None = None
    link: int | None = None
    controller: int = 0  # which controller it asks first


@dataclass
class Acked:
    number: int
    offset: int
    data: bytes


class AutoSwitchSim(ControllerSim):
    def __init__(self, seed: int, *, steps: int = 8000, bugs: frozenset[str] = frozenset()):
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        super().__init__(seed, steps=steps, bugs=frozenset(bugs) & set(CONTROLLER_BUGS))
        self.switch_bug = next((b for b in sorted(bugs) if b in AUTOSWITCH_BUGS), None)
        rng = self.w.rng
        self.ha = HAConfig(segment_size=1 << 20, heartbeat_ms=40, housekeeping_ms=400,
                           sync_timeout_ms=rng.choice((150, 400)), fallbehind_max=1 << 30,
                           transfer_batch=rng.choice((64, 700)), window=rng.choice((300, 4096)))
        self.sync = SyncConfig(max_not_catch_up_ms=rng.choice((200, 500)), all_ack=True,
                               proposal_timeout_ms=300)
        self.brokers = {f"b{i}": Broker(f"b{i}") for i in (1, 2, 3)}
        self.net_links = Links(self.w, kind="link")
        self.links = self.net_links.open  # id -> (slave, master)
        self.rpc: dict[int, tuple[str, str]] = {}  # proposal id -> (broker, what)
        self.waiting: dict[int, tuple[str, int, int, int]] = {}  # rid -> broker, n, off, end
        self.acked: list[Acked] = []
        self.sends = 0
        self.truncations = 0
        self.masters_started = 0

    # ---- the broker <-> controller requests -------------------------------------------
    def _ask(self, name: str, request: tuple) -> None:
        b = self.brokers[name]
        self.w.send(name, self.ids[b.controller % len(self.ids)], ("breq", name, request))

    def _heartbeat(self, name: str) -> None:
        b = self.brokers[name]
        if not b.alive:
            return
        if b.broker_id is None:
            self._ask(name, ("register",))
        else:
            self._ask(name, ("heartbeat", b.broker_id))

    def _controller_request(self, node_id: str, name: str, request: tuple) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        if not node.is_leader:
            self.w.send(node_id, name, ("bresp", "notleader"))
            return
        kind = request[0]
        g = node.metadata.groups.get(GROUP)
        if kind == "heartbeat":
            node.broker_heartbeat(GROUP, request[1], self.w.now)
            if g is not None:
                self.w.send(node_id, name, ("bresp", "view", g.view()))
            return
        if kind == "register":
            cmd = RegisterBroker("c", GROUP, name, name)
        elif kind == "elect":
            alive = tuple(sorted(b for (grp, b), t in node.heard.items()
                                 if grp == GROUP and self.w.now - t < NOT_ACTIVE_MS))
            cmd = ElectMaster(GROUP, alive)
        else:  # alter
            _, master_id, master_epoch, members, set_epoch = request
            cmd = AlterSyncStateSet(GROUP, master_id, master_epoch, members, set_epoch)
        rid = self.next_rid
        self.next_rid += 1
        self.rpc[rid] = (name, kind)
        self._execute(node_id, node.propose(rid, cmd, self.w.now))

    def _answered(self, node_id: str, a: Answer) -> None:
        who = self.rpc.pop(a.request_id, None)
        if who is not None:
            self.w.send(node_id, who[0], ("bresp", who[1], a.result))

    def _broker_response(self, name: str, kind: str, payload) -> None:
        b = self.brokers[name]
        if not b.alive:
            return
        if kind == "notleader":
            b.controller += 1
        elif kind == "register" and payload.ok:
            b.broker_id = payload.data["brokerId"]
        elif kind == "view" or (kind == "elect" and payload.ok):
            view = payload if kind == "view" else payload.data
            if view["masterBrokerId"] is None:
                self._ask(name, ("elect",))
            else:
                self._apply_view(b, view)
        elif kind == "alter" and b.master is not None:
            r = payload
            members = tuple(r.data["syncStateSet"]) if r.ok else None
            epoch = r.data["syncStateSetEpoch"] if r.ok else b.master.tracker.set_epoch
            self.w.log(f"{b.name}: SyncStateSet {members} (epoch {epoch})" if r.ok else
                       f"{b.name}: SyncStateSet change refused: {r.error}")
            b.master.tracker.applied(members, epoch, self.w.now,
                                     stale=STALE_SET_EPOCH in r.error)
            self._run_master(b, b.master.set_changed())

    # ---- roles ------------------------------------------------------------------------
    def _apply_view(self, b: Broker, view: dict) -> None:
        master, epoch = view["masterBrokerId"], view["masterEpoch"]
        if epoch < b.master_epoch:
            return  # an older view, overtaken on the network: as ReplicasManager.apply
        b.view = view
        if master == b.broker_id:
            if b.role != "MASTER" or b.master_epoch != epoch:
                self._become_master(b, view)
            else:
                b.master.tracker.controller_view(tuple(view["syncStateSet"]),
                                                 view["syncStateSetEpoch"], self.w.now)
                self._run_master(b, b.master.set_changed())
        elif b.role != "SLAVE" or b.master_epoch != epoch:
            self._become_slave(b, view)

    def _drop_roles(self, b: Broker) -> None:
        self.net_links.close_all(b.name, f"{b.name} changes role")
        if b.master is not None:  # waiting sends fail: the old master cannot ack them
            for rid in [r for r, w in self.waiting.items() if w[0] == b.name]:
                del self.waiting[rid]
        b.master = b.slave = None
        b.link = None

    def _become_master(self, b: Broker, view: dict) -> None:
        self._drop_roles(b)
        epoch = view["masterEpoch"]
        if not b.epochs or epoch > b.epochs[-1][0]:
            b.epochs.append((epoch, b.log.end))
        self._check_acked_in(b)
        self._check_epochs()
        tracker = SyncStateTracker(b.broker_id, tuple(view["syncStateSet"]),
                                   view["syncStateSetEpoch"], b.log.end, self.w.now, self.sync,
                                   bug=self.switch_bug)
        b.master = AutoSwitchMaster(self.ha, b.epochs, 0, b.log.end, tracker, self.w.now)
        b.role, b.master_epoch = "MASTER", epoch
        self.masters_started += 1
        self.w.log(f"{b.name} (id {b.broker_id}) masters epoch {epoch} at {b.log.end}")

    def _become_slave(self, b: Broker, view: dict) -> None:
        self._drop_roles(b)
        b.slave = AutoSwitchSlave(self.ha, b.broker_id, b.epochs, b.log.end, self.w.now,
                                  bug=self.switch_bug)
        b.slave.reconnect_ms = 30
        b.role, b.master_epoch = "SLAVE", view["masterEpoch"]
        self._run_slave(b, [Connect()])

    # ---- links ------------------------------------------------------------------------
    def _link_send(self, src: str, dst: str, link: int, msg: tuple) -> None:
        self.net_links.send(src, dst, msg, link)

    def _close(self, link: int, reason: str) -> None:
        self.net_links.close(link, reason)

    def _connect(self, b: Broker) -> None:
        mid = b.view.get("masterBrokerId")
        m = next((x for x in self.brokers.values() if x.broker_id == mid), None)
        if m is None or not m.alive or m.master is None or \
                (b.name, m.name) in self.w.net.blocked:
            b.slave.disconnected(self.w.now)
            return
        link = b.link = self.net_links.connect(b.name, m.name)
        self._run_master(m, m.master.connected(link, self.w.now))
        self._run_slave(b, b.slave.connected(self.w.now))

    # ---- the drivers ------------------------------------------------------------------
    def _run_master(self, b: Broker, actions: list) -> None:
        for a in actions:
            if isinstance(a, (EpochTransfer, SendEpochs)):
                if a.link in self.links:
                    if isinstance(a, EpochTransfer):
                        body = bytes(b.log.data[a.offset:a.offset + a.size])
                        msg = ("data", a.offset, a.size, a.epoch, a.epoch_start, a.confirm, body)
                    else:
                        msg = ("epochs", list(a.epochs), a.log_end)
                    self._link_send(b.name, self.links[a.link][0], a.link, msg)
            elif isinstance(a, Close):
                self._close(a.link, a.reason)
            elif isinstance(a, ProposeSyncStateSet):
                self._ask(b.name, ("alter", b.broker_id, b.master_epoch, a.members,
                                   a.set_epoch))
            elif isinstance(a, Complete):
                w = self.waiting.pop(a.request_id, None)
                if w is not None and a.status is SyncStatus.OK:
                    _, number, off, end = w
                    if number % 50 == 0 or number < 20:
                        self.w.log(f"{b.name} acked message {number} at {off} (set "
                                   f"{b.master.tracker.members})")
                    self.acked.append(Acked(number, off, bytes(b.log.data[off:end])))

    def _run_slave(self, b: Broker, actions: list) -> None:
        for a in actions:
            if isinstance(a, SendHandshake):
                if b.link in self.links:
                    self._link_send(b.name, self.links[b.link][1], b.link,
                                    ("hello", a.slave_id, a.learner, a.from_last_file))
            elif isinstance(a, Report):
                if b.link in self.links:
                    self._link_send(b.name, self.links[b.link][1], b.link, ("report", a.offset))
            elif isinstance(a, TruncateLog):
                self.truncations += 1
                self.w.log(f"{b.name} truncates {b.log.end} -> {a.offset}")
                del b.log.data[a.offset:]
                if self.w.rng.random() < 0.1:  # crash between the log cut and the epochs cut
                    self._crash_broker(b, "while truncating")
                    return
                b.epochs[:] = [e for e in b.epochs if e[1] < a.offset]
            elif isinstance(a, RecordEpoch):
                b.epochs.append((a.epoch, a.start))
                self._check_epochs()
            elif isinstance(a, Append):
                self._check_prefix(b)  # what the handshake kept must be the master's
                end = b.log.append_prefix(a.offset, a.data)
                self._check_prefix(b)
                self._run_slave(b, b.slave.appended(end, self.w.now))
            elif isinstance(a, Disconnect):
                if b.link is not None:
                    self._close(b.link, a.reason)
                b.link = None
            elif isinstance(a, Connect):
                self._connect(b)
            elif isinstance(a, StartAt):
                raise Violation(f"{b.name}: the simulated logs all start at 0")
            elif isinstance(a, Confirmed):
                pass

    def _link_message(self, dst: str, link: int, msg: tuple) -> None:
        b = self.brokers[dst]
        if link not in self.links or not b.alive:
            return
        now = self.w.now
        kind = msg[0]
        if kind == "hello" and b.master is not None:
            self._run_master(b, b.master.handshake(link, msg[1], msg[2], msg[3], now))
        elif kind == "report" and b.master is not None:
            self._run_master(b, b.master.report(link, msg[1], now))
        elif kind == "epochs" and b.slave is not None:
            self._run_slave(b, b.slave.master_epochs(msg[1], msg[2], now))
        elif kind == "data" and b.slave is not None:
            self._run_slave(b, b.slave.data(*msg[1:], now))

    # ---- producers --------------------------------------------------------------------
    def _produce(self) -> None:
        masters = [b for b in self.brokers.values() if b.alive and b.master is not None]
        if not masters:
            return
        b = self.w.rng.choice(masters)
        number = self.sends
        self.sends += 1
        off, end = b.log.append(number, self.w.rng.randbytes(self.w.rng.randint(1, 90)))
        rid = self.next_rid
        self.next_rid += 1
        self.waiting[rid] = (b.name, number, off, end)
        now = self.w.now
        self._run_master(b, b.master.appended(end, now) + b.master.sync(rid, end, now))

    # ---- checks -----------------------------------------------------------------------
    def _check_acked_in(self, b: Broker) -> None:
        data = b.log.data
        for a in self.acked:
            if bytes(data[a.offset:a.offset + len(a.data)]) != a.data:
                raise Violation(f"{b.name} became master without acknowledged message "
                                f"{a.number} at {a.offset}")

    def _check_prefix(self, b: Broker) -> None:
        m = next((x for x in self.brokers.values() if x.name == self.links.get(
            b.link, ("", ""))[1]), None)
        if m is None or m.master is None:
            return
        n = b.log.end
        if bytes(b.log.data) != bytes(m.log.data[:n]):
            raise Violation(f"{b.name}'s log is not a prefix of its master {m.name}'s")

    def _check_epochs(self) -> None:
        seen: dict[int, tuple[str, int]] = {}
        for b in self.brokers.values():
            for epoch, start in b.epochs:
                other = seen.setdefault(epoch, (b.name, start))
                if other[1] != start:
                    raise Violation(f"epoch {epoch} starts at {other[1]} on {other[0]} but at "
                                    f"{start} on {b.name}")

    # ---- faults -----------------------------------------------------------------------
    def _crash_broker(self, b: Broker, why: str) -> None:
        self._drop_roles(b)
        b.alive, b.role, b.master_epoch = False, "NONE", -1
        self.w.log(f"{b.name} crashed {why}")
        self.w.at(self.w.rng.randint(100, 1200), "brestart", b.name)

    def _restart_broker(self, b: Broker) -> None:
        b.alive = True
        b.epochs[:] = [e for e in b.epochs if e[1] <= b.log.end]  # as load_epochs
        self.w.log(f"{b.name} restarted (log end {b.log.end})")

    def handle(self, kind: str, payload) -> None:
        w, rng = self.w, self.w.rng
        if kind == "tick":
            node = self.nodes.get(payload)
            if node is not None:
                self._execute(payload, node.tick(w.now))
            w.at(TICK_MS, "tick", payload)
        elif kind == "deliver":
            dst, msg = payload
            if isinstance(msg, tuple) and msg[0] == "bresp":
                self._broker_response(dst, msg[1], msg[2] if len(msg) > 2 else None)
            elif isinstance(msg, tuple) and msg[0] == "breq":
                self._controller_request(dst, msg[1], msg[2])
            else:
                super().handle(kind, payload)
        elif kind == "btick":
            b = self.brokers[payload]
            if b.alive and b.master is not None:
                self._run_master(b, b.master.tick(w.now))
            elif b.alive and b.slave is not None:
                self._run_slave(b, b.slave.tick(w.now))
            w.at(TICK_MS, "btick", payload)
        elif kind == "bhb":
            self._heartbeat(payload)
            w.at(HEARTBEAT_MS, "bhb", payload)
        elif kind == "link":
            self._link_message(*payload)
        elif kind == "closed":
            name, link = payload
            b = self.brokers[name]
            if b.master is not None:
                self._run_master(b, b.master.disconnected(link))
            if b.slave is not None and b.link == link:
                b.link = None
                b.slave.disconnected(w.now)
        elif kind == "client":
            for _ in range(rng.randint(1, 3)):
                self._produce()
            w.at(rng.randint(5, 40), "client")
        elif kind == "brestart":
            self._restart_broker(self.brokers[payload])
        elif kind == "fault":
            self._fault()
        else:
            super().handle(kind, payload)

    def _fault(self) -> None:
        w, rng = self.w, self.w.rng
        if w.steps > self.steps * 0.7:
            return
        r = rng.random()
        names = sorted(self.brokers)
        if r < 0.35:
            b = self.brokers[rng.choice(names)]
            if b.alive:
                self._crash_broker(b, "(kill -9)")
        elif r < 0.5:
            victim = rng.choice(self.ids)
            if self.nodes.get(victim) is not None:
                self.nodes[victim] = None
                w.log(f"{victim} crashed")
                w.at(rng.randint(100, 1500), "restart", victim)
        elif r < 0.75:  # a broker cut off from everyone (controllers and brokers)
            victim = rng.choice(names)
            w.partition([{victim}, (set(names) | set(self.ids)) - {victim}])
            w.log(f"{victim} partitioned")
            self.net_links.close_all(victim, "partition")
            w.at(rng.randint(100, 1200), "heal")
        else:  # a controller cut off
            victim = rng.choice(self.ids)
            w.partition([{victim}, (set(names) | set(self.ids)) - {victim}])
            w.at(rng.randint(100, 1200), "heal")
        w.at(rng.randint(150, 600), "fault")

    # ---- running ----------------------------------------------------------------------
    def run(self) -> SimResult:
        w = self.w
        for i in self.ids:
            self._start(i)
            w.at(w.rng.randint(0, TICK_MS), "tick", i)
        for name in self.brokers:
            w.at(w.rng.randint(0, HEARTBEAT_MS), "bhb", name)
            w.at(w.rng.randint(0, TICK_MS), "btick", name)
        w.at(200, "client")
        w.at(500, "fault")
        try:
            w.run_until(lambda: False, self.handle, self.steps)
            self._heal_and_check_progress()
        except Violation as e:
            return SimResult(w.seed, False, w.steps, w.now, str(e), list(w.trace),
                             self.stats())
        return SimResult(w.seed, True, w.steps, w.now, stats=self.stats())

    def _heal_and_check_progress(self) -> None:
        w = self.w
        w.net.heal()
        for i in self.ids:
            if self.nodes.get(i) is None:
                self._start(i)
        for b in self.brokers.values():
            if not b.alive:
                self._restart_broker(b)
        before = len(self.acked)
        deadline = w.now + 10_000
        w.run_until(lambda: len(self.acked) > before + 5 or w.now > deadline, self.handle,
                    w.steps + 200_000)
        if len(self.acked) <= before + 5:
            raise Violation("no send was acknowledged within 10 s after every fault healed")

    def stats(self) -> dict:
        return {**super().stats(), "acked": len(self.acked), "sends": self.sends,
                "truncations": self.truncations, "masters": self.masters_started}
