"""Controller mode (S1) end to end in the simulator: three ControllerNodes (Raft + the
metadata state machine, as ControllerSim) and three brokers running the real
AutoSwitchMaster / AutoSwitchSlave / SyncStateTracker cores. Brokers register,
heartbeat, ask for elections and SyncStateSet changes over a faulty network; producers
send to whoever is master; brokers, controllers and links fail and come back; a broker
may crash between cutting its log and cutting its epoch file, and a crash may lose the
unflushed tail of its consume queues (they lag its log at the next role change, #28).
Each broker's dispatch bound models its consume queues: consumers read what lies below it,
raised as the drivers raise it (a slave by the master's confirm offset, a master by its
SyncStateSet's) and lowered by a cut.

Checked after every step, besides the controller group's own invariants:
- acked-on-new-master: every send acknowledged under the SyncStateSet rule
  (allAckInSyncStateSet) is in a new master's log, at the same offset, when it starts;
- slave-prefix: after the handshake truncation a slave's log is a prefix of its master's;
- epoch-agreement: epoch files agree on where every epoch two brokers share starts;
- no-needless-cut: a slave never cuts a tail its master holds byte for byte (its epochs
  must say where its history and the master's part);
- queues-within-log: no broker's queues name bytes past its log's end;
- liveness: after the faults heal, a master serves and sends are acknowledged again;
- acked-readable: after the faults heal, every acknowledged send is readable through the
  master's queues, not only present in its log.

A broker's log survives its crash (SYNC_FLUSH-like: it reports only what it wrote).
"""
from __future__ import annotations

from typing import ClassVar

from ..controller import BUGS as CONTROLLER_BUGS
from ..controller import AlterSyncStateSet, Answer, ElectMaster, RegisterBroker
from ..controller.liveness import BrokerReport
from ..controller.metadata import refusal_may_have_applied
from ..replication.autoswitch import BUGS as AUTOSWITCH_BUGS
from ..replication.autoswitch.sync_state import ProposeSyncStateSet, SyncConfig, SyncStateTracker
from ..replication.autoswitch.transfer import (
    AutoSwitchMaster, AutoSwitchSlave, Confirmed, EpochTransfer, RecordEpoch, SendEpochs,
    SendHandshake, TruncateLog,
)
from ..replication.ha import (
    Append, Close, Complete, Connect, Disconnect, HAConfig, Report, StartAt, SyncStatus,
)
from . import autoswitch_checks as checks
from .autoswitch_checks import Acked, Broker
from .autoswitch_wire import (
    Ack, AlterAsk, Answered, Ask, Data, ElectAsk, Epochs, HeartbeatAsk, Hello, NotLeader,
    RegisterAsk, Reply, ViewReply,
)
from .controller import GROUP, ControllerSim
from .events import (
    CLIENT, FAULT, HEAL, Beat, Client, Deliver, Fault, LinkClosed, LinkDeliver, Restart, Tick,
)
from .harness import LIVENESS
from .links import Links, SlaveLinking
from .result import Violation

# the drivers' bugs (the cores' are in AUTOSWITCH_BUGS)
DRIVER_BUGS = {
    "epochs-trimmed-before-recovery": "a restarted broker trims its epoch file against the "
                                      "log's end before the store recovered it (0)",
    "queue-tail-not-redispatched": "a restarted broker never rebuilds the queue entries its "
                                   "crash lost (recovery dispatches only past them)",
}
BUGS = {**CONTROLLER_BUGS, **AUTOSWITCH_BUGS, **DRIVER_BUGS}
TICK_MS = 10  # brokers and controllers alike
HEARTBEAT_MS = 60  # broker -> controller


class AutoSwitchSim(SlaveLinking, ControllerSim):
    BUGS = BUGS
    INVARIANTS: ClassVar[dict[str, str]] = {
        **ControllerSim.INVARIANTS,
        "acked-on-new-master": "a new master holds every acknowledged send at its offset",
        "slave-prefix": "a slave's log is a prefix of its master's",
        "epoch-agreement": "brokers agree on where each epoch they share starts",
        "logs-start-at-zero": "no slave is told to start anywhere but 0",
        "no-needless-cut": "a slave never cuts a tail its master holds byte for byte",
        "queues-within-log": "no broker's queues name bytes past its log's end",
        LIVENESS: "after every fault heals, sends are acknowledged again within 10 s",
        "acked-readable": "after every fault heals, every acknowledged send is readable "
                          "through the master's queues",
    }

    def __init__(self, seed: int, *, steps: int = 8000, bugs=frozenset(),
                 trace_events: bool = False):
        super().__init__(seed, steps=steps, bugs=bugs, trace_events=trace_events)
        self.switch_bug = self.bug_in(AUTOSWITCH_BUGS)
        self.driver_bug = self.bug_in(DRIVER_BUGS)
        rng = self.rng
        self.ha = HAConfig(segment_size=1 << 20, heartbeat_ms=40, housekeeping_ms=400,
                           sync_timeout_ms=rng.choice((150, 400)), fallbehind_max=1 << 30,
                           transfer_batch=rng.choice((64, 700)), window=rng.choice((300, 4096)))
        self.sync = SyncConfig(max_not_catch_up_ms=rng.choice((200, 500)), all_ack=True,
                               proposal_timeout_ms=300)
        self.brokers = {f"b{i}": Broker(f"b{i}") for i in (1, 2, 3)}
        self.net_links = Links(self.w)
        self.links = self.net_links.open  # id -> (slave, master)
        self.rpc: dict[int, tuple[str, Ask]] = {}  # proposal id -> (broker, its request)
        self.waiting: dict[int, tuple[str, int, int, int]] = {}  # rid -> broker, n, off, end
        self.acked: list[Acked] = []
        self.sends = 0
        self.truncations = 0
        self.truncated_bytes = 0  # what slaves cut from their logs to follow a new master
        self.masters_started = 0
        self._ticks.update({name: Tick(name) for name in self.brokers})
        self._beats = {name: Beat(name) for name in self.brokers}

    def start(self) -> None:
        w = self.w
        for i in self.ids:
            self._start(i)
            w.at(self.rng.randint(0, TICK_MS), self._ticks[i])
        for name in self.brokers:
            w.at(self.rng.randint(0, HEARTBEAT_MS), self._beats[name])
            w.at(self.rng.randint(0, TICK_MS), self._ticks[name])
        w.at(200, CLIENT)
        w.at(500, FAULT)

    # ---- the broker <-> controller requests -------------------------------------------
    def _ask(self, ask: Ask) -> None:
        b = self.brokers[ask.broker]
        self.w.send(ask.broker, self.ids[b.controller % len(self.ids)], ask)

    def on_beat(self, ev: Beat) -> None:
        b = self.brokers[ev.node]
        if b.alive:
            self._ask(RegisterAsk(b.name) if b.broker_id is None else HeartbeatAsk(
                b.name, b.broker_id, b.epochs[-1][0] if b.epochs else 0, b.log.end))
        self.w.at(HEARTBEAT_MS, ev)

    def _controller_request(self, node_id: str, ask: Ask) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        if not node.is_leader:
            self.w.send(node_id, ask.broker, NotLeader())
            return
        if isinstance(ask, HeartbeatAsk):
            node.broker_heartbeat(GROUP, ask.broker_id, self.w.now,
                                  BrokerReport(ask.epoch, ask.max_offset))
            g = node.metadata.groups.get(GROUP)
            if g is not None:
                self.w.send(node_id, ask.broker, ViewReply(g.view()))
            return
        if isinstance(ask, RegisterAsk):
            cmd = RegisterBroker("c", GROUP, ask.broker, ask.broker)
        elif isinstance(ask, ElectAsk):
            cmd = ElectMaster(GROUP, node.candidates(GROUP, self.w.now))
        else:
            cmd = AlterSyncStateSet(GROUP, ask.master_id, ask.master_epoch, ask.members,
                                    ask.set_epoch)
        rid = self.next_rid
        self.next_rid += 1
        self.rpc[rid] = (ask.broker, ask)
        self._execute(node_id, node.propose(rid, cmd, self.w.now))

    def _answered(self, node_id: str, a: Answer) -> None:
        who = self.rpc.pop(a.request_id, None)
        if who is not None:
            self.w.send(node_id, who[0], Answered(who[1], a.result))

    def _broker_response(self, name: str, reply: Reply) -> None:
        b = self.brokers[name]
        if not b.alive:
            return
        if isinstance(reply, NotLeader):
            b.controller += 1
            return
        if isinstance(reply, ViewReply):
            view = reply.view
        else:
            ask, r = reply.ask, reply.result
            if isinstance(ask, RegisterAsk):
                if r.ok:
                    b.broker_id = r.data["brokerId"]
                return
            if isinstance(ask, AlterAsk):
                if b.master is not None:
                    self._set_changed(b, r)
                return
            if not r.ok:
                return
            view = r.data
        if view["masterBrokerId"] is None:
            self._ask(ElectAsk(name))
        else:
            self._apply_view(b, view)

    def _set_changed(self, b: Broker, r) -> None:
        members = tuple(r.data["syncStateSet"]) if r.ok else None
        epoch = r.data["syncStateSetEpoch"] if r.ok else b.master.tracker.set_epoch
        self.w.log(f"{b.name}: SyncStateSet {members} (epoch {epoch})" if r.ok else
                   f"{b.name}: SyncStateSet change refused: {r.error}")
        b.master.tracker.applied(members, epoch, self.w.now,
                                 maybe_applied=refusal_may_have_applied(r.error))
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
        checks.acked_in(b, self.acked)
        checks.epochs_agree(self.brokers.values())
        tracker = SyncStateTracker(b.broker_id, tuple(view["syncStateSet"]),
                                   view["syncStateSetEpoch"], b.log.end, self.w.now, self.sync,
                                   bug=self.switch_bug)
        b.master = AutoSwitchMaster(self.ha, b.epochs, 0, b.log.end, tracker, self.w.now)
        b.role, b.master_epoch = "MASTER", epoch
        self._raise_bound(b, tracker.confirm_offset)
        self.masters_started += 1
        self.w.log(f"{b.name} (id {b.broker_id}) masters epoch {epoch} at {b.log.end}")

    def _become_slave(self, b: Broker, view: dict) -> None:
        self._drop_roles(b)
        b.slave = AutoSwitchSlave(self.ha, b.broker_id, b.epochs, b.log.end, self.w.now,
                                  bug=self.switch_bug)
        b.slave.reconnect_ms = 30
        b.role, b.master_epoch = "SLAVE", view["masterEpoch"]
        self._run_slave(b, [Connect()])

    def _connect(self, b: Broker) -> None:
        mid = b.view.get("masterBrokerId")
        self._link_to(b, next((x for x in self.brokers.values() if x.broker_id == mid), None))

    # ---- the drivers ------------------------------------------------------------------
    def _run_master(self, b: Broker, actions: list) -> None:
        for a in actions:
            if isinstance(a, EpochTransfer):
                self.net_links.to_slave(b.name, a.link, Data(
                    a.offset, a.size, a.epoch, a.epoch_start, a.confirm,
                    b.log.read(a.offset, a.offset + a.size)))
            elif isinstance(a, SendEpochs):
                self.net_links.to_slave(b.name, a.link, Epochs(tuple(a.epochs), a.log_end))
            elif isinstance(a, Close):
                self.net_links.close(a.link, a.reason)
            elif isinstance(a, ProposeSyncStateSet):
                self._ask(AlterAsk(b.name, b.broker_id, b.master_epoch, a.members,
                                   a.set_epoch))
            elif isinstance(a, Complete):
                self._raise_bound(b, b.master.tracker.confirm_offset)
                w = self.waiting.pop(a.request_id, None)
                if w is not None and a.status is SyncStatus.OK:
                    _, number, off, end = w
                    if number % 50 == 0 or number < 20:
                        self.w.log(f"{b.name} acked message {number} at {off} (set "
                                   f"{b.master.tracker.members})")
                    self.acked.append(Acked(number, off, b.log.read(off, end)))

    def _run_slave(self, b: Broker, actions: list) -> None:
        for a in actions:
            if isinstance(a, SendHandshake):
                self.net_links.to_master(b.name, b.link,
                                         Hello(a.slave_id, a.learner, a.from_last_file))
            elif isinstance(a, Report):
                self.net_links.to_master(b.name, b.link, Ack(a.offset))
            elif isinstance(a, TruncateLog):
                self.truncations += 1
                self.truncated_bytes += b.log.end - a.offset
                self.w.log(f"{b.name} truncates {b.log.end} -> {a.offset}")
                checks.cut_needed(b, self._master_of(b), a.offset)
                b.log.truncate(a.offset)
                b.bound = min(b.bound, a.offset)
                b.holes = [(lo, min(hi, a.offset)) for lo, hi in b.holes if lo < a.offset]
                if self.rng.random() < 0.1:  # crash between the log cut and the epochs cut
                    self._crash_broker(b, "while truncating")
                    return
                b.epochs[:] = [e for e in b.epochs if e[1] < a.offset]
            elif isinstance(a, RecordEpoch):
                b.epochs.append((a.epoch, a.start))
                checks.epochs_agree(self.brokers.values())
            elif isinstance(a, Append):
                checks.prefix_of_master(b, self._master_of(b))  # what the handshake kept must be the master's
                end = b.log.append_prefix(a.offset, a.data)
                checks.prefix_of_master(b, self._master_of(b))
                self._raise_bound(b, b.slave.confirmed)
                self._run_slave(b, b.slave.appended(end, self.w.now))
            elif isinstance(a, Disconnect):
                if b.link is not None:
                    self.net_links.close(b.link, a.reason)
                b.link = None
            elif isinstance(a, Connect):
                self._connect(b)
            elif isinstance(a, StartAt):
                raise Violation("logs-start-at-zero", f"{b.name} told to start at {a.offset}")
            elif isinstance(a, Confirmed):
                self._raise_bound(b, a.offset)

    def on_link_deliver(self, ev: LinkDeliver) -> None:
        b, link, msg, now = self.brokers[ev.dst], ev.link, ev.msg, self.w.now
        if link not in self.links or not b.alive:
            return
        if b.master is not None and isinstance(msg, Hello):
            self._run_master(b, b.master.handshake(link, msg.slave_id, msg.learner,
                                                   msg.from_last_file, now))
        elif b.master is not None and isinstance(msg, Ack):
            self._run_master(b, b.master.report(link, msg.offset, now))
        elif b.slave is not None and isinstance(msg, Epochs):
            self._run_slave(b, b.slave.master_epochs(list(msg.epochs), msg.log_end, now))
        elif b.slave is not None and isinstance(msg, Data):
            self._run_slave(b, b.slave.data(msg.offset, msg.size, msg.epoch, msg.epoch_start,
                                            msg.confirm, msg.body, now))

    def on_link_closed(self, ev: LinkClosed) -> None:
        b = self.brokers[ev.node]
        if b.master is not None:
            self._run_master(b, b.master.disconnected(ev.link))
        if b.slave is not None and b.link == ev.link:
            b.link = None
            b.slave.disconnected(self.w.now)

    # ---- producers --------------------------------------------------------------------
    def on_client(self, _: Client) -> None:
        for _ in range(self.rng.randint(1, 3)):
            self._produce()
        self.w.at(self.rng.randint(5, 40), CLIENT)

    def _produce(self) -> None:
        masters = [b for b in self.brokers.values() if b.alive and b.master is not None]
        if not masters:
            return
        b = self.rng.choice(masters)
        number = self.sends
        self.sends += 1
        off, end = b.log.append(number, self.rng.randbytes(self.rng.randint(1, 90)))
        rid = self.next_rid
        self.next_rid += 1
        self.waiting[rid] = (b.name, number, off, end)
        now = self.w.now
        self._run_master(b, b.master.appended(end, now) + b.master.sync(rid, end, now))

    def _master_of(self, b: Broker) -> Broker | None:
        """The broker at the master's end of `b`'s HA link."""
        return self.brokers.get(self.links.get(b.link, ("", ""))[1])

    def _raise_bound(self, b: Broker, offset: int) -> None:
        """As store.set_dispatch_bound: up only, never past the log's end."""
        b.bound = max(b.bound, min(offset, b.log.end))
        if b.bound > b.log.end:
            raise Violation("queues-within-log", f"{b.name}'s queues reach {b.bound}, its "
                            f"log ends at {b.log.end}")

    # ---- events and faults ------------------------------------------------------------
    def on_tick(self, ev: Tick) -> None:
        b = self.brokers.get(ev.node)
        if b is None:  # a controller (its brokers heartbeat for real here)
            node = self.nodes.get(ev.node)
            if node is not None:
                self._execute(ev.node, node.tick(self.w.now))
        elif b.alive and b.master is not None:
            self._run_master(b, b.master.tick(self.w.now))
        elif b.alive and b.slave is not None:
            self._run_slave(b, b.slave.tick(self.w.now))
        self.w.at(TICK_MS, ev)

    def on_deliver(self, ev: Deliver) -> None:
        if isinstance(ev.msg, Reply):
            self._broker_response(ev.dst, ev.msg)
        elif isinstance(ev.msg, Ask):
            self._controller_request(ev.dst, ev.msg)
        else:
            super().on_deliver(ev)

    def on_restart(self, ev: Restart) -> None:
        if ev.node in self.brokers:
            self._restart_broker(self.brokers[ev.node])
        else:
            super().on_restart(ev)

    def on_fault(self, _: Fault) -> None:
        if not self.faulting:
            return
        w, rng = self.w, self.rng
        r = rng.random()
        names = sorted(self.brokers)
        everyone = set(names) | set(self.ids)
        if r < 0.35:
            b = self.brokers[rng.choice(names)]
            if b.alive:
                self._crash_broker(b, "(kill -9)")
        elif r < 0.5:
            self._crash_controller(rng.choice(self.ids))
        elif r < 0.75:  # a broker cut off from everyone (controllers and brokers)
            victim = rng.choice(names)
            w.partition([{victim}, everyone - {victim}])
            w.log(f"{victim} partitioned")
            self.net_links.close_all(victim, "partition")
            w.at(rng.randint(100, 1200), HEAL)
        else:  # a controller cut off
            self._cut_off(rng.choice(self.ids), everyone)
        w.at(rng.randint(150, 600), FAULT)

    def _crash_broker(self, b: Broker, why: str) -> None:
        self._drop_roles(b)
        b.alive, b.role, b.master_epoch = False, "NONE", -1
        # the consume queues flush lazily: a crash may lose their unflushed tail, so they
        # lag the log when the broker comes back (recovery dispatches it again as the
        # bound rises)
        if self.rng.random() < 0.5:
            kept = self.rng.randint(0, b.bound)
            if self.driver_bug == "queue-tail-not-redispatched":
                b.holes.append((kept, b.bound))
            else:
                b.bound = kept
        self.w.log(f"{b.name} crashed {why}")
        self.w.at(self.rng.randint(100, 1200), Restart(b.name))

    def _restart_broker(self, b: Broker) -> None:
        b.alive = True
        end = 0 if self.driver_bug == "epochs-trimmed-before-recovery" else b.log.end
        b.epochs[:] = [e for e in b.epochs if e[1] <= end]  # as load_epochs
        self.w.log(f"{b.name} restarted (log end {b.log.end})")

    # ---- settling ---------------------------------------------------------------------
    def recover(self) -> None:
        super().recover()
        for b in self.brokers.values():
            if not b.alive:
                self._restart_broker(b)

    def check_liveness(self) -> None:
        before = len(self.acked)
        self.expect(lambda: len(self.acked) > before + 5,
                    "no send was acknowledged within 10 s after every fault healed")
        if not self.wait_for(lambda: checks.acked_readable(self.brokers.values(), self.acked)):
            m = next((b for b in self.brokers.values() if b.alive and b.master), None)
            raise Violation("acked-readable", "after every fault healed, acknowledged sends "
                            f"are not all readable through the master's queues (master "
                            f"{m and m.name}, queues to {m and m.bound}, last acked ends at "
                            f"{max((a.offset + len(a.data) for a in self.acked), default=0)})")

    def stats(self) -> dict:
        return {**super().stats(), "acked": len(self.acked), "sends": self.sends,
                "truncations": self.truncations, "truncated_bytes": self.truncated_bytes,
                "masters": self.masters_started}
