"""A master/slave broker group over HA links, the part classic HA (S2, `classic_ha`) and the
checkpoint scheme (S3, `checkpoint`) share: the real HAMaster / HASlave cores on brokers
with a SimLog each, TCP-like links that keep order and can be cut, broker crashes and
restarts, partitions, slow networks, producers sending throughout, and the checks both
designs promise.

Invariants checked here (names as in INVARIANTS):
- slave-prefix: a slave's log is always a prefix of the log of the master it follows;
- liveness: once every fault heals, a new send is acknowledged within SETTLE_MS.

A subclass decides who leads and follows (`_start_roles`, `_rejoin`), what an
acknowledgement must guarantee (`_on_acked`), and what a sync timeout means (`_timed_out`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..replication.ha import BUGS as HA_BUGS
from ..replication.ha import SLAVE_BUGS
from ..replication.ha import (
    DIGEST, REFILL_FRAME, TAIL_BYTES, tail_digest, Append, AskRefill, Close, Complete, Connect,
    Disconnect, Flush, HAConfig, HAMaster, HASlave, Heartbeat, PublishCheckpoint, Recovered,
    RefillAppend, Report, SaveCheckpoint, SendLog, StartAt, StoreCheckpoint, SyncStatus, Transfer,
)
from .disk import SimLog
from .events import (
    CLIENT, FAULT, HEAL, Client, Fault, FlushDone, Heal, LinkClosed, LinkDeliver, Restart, Tick,
)
from .harness import LIVENESS, Simulation
from .links import Links, SlaveLinking
from .result import Violation

TICK_MS = 10
FLUSH_MS = ((1, 5), (5, 40))  # how long a group-commit flush takes (S3): fast or slow disk


@dataclass(frozen=True, slots=True)
class Frame:
    """Master -> slave, as the HA wire frame: `size` bytes of log at `offset`; size 0 is a
    heartbeat (offset: the master's end); size -1 publishes a checkpoint (S3) at `offset`."""
    offset: int
    size: int
    body: bytes


@dataclass(frozen=True, slots=True)
class SlaveReport:
    """Slave -> master: how far its log goes (its ack); in S3 `slot` names it and `epoch`
    is the epoch whose master it follows."""
    offset: int
    slot: int | None
    epoch: int = 0
    digest: int | None = None  # S2, first on a link: the tail digest before `offset`


@dataclass(frozen=True, slots=True)
class RefillChunk:
    """Slave -> master: `body`, its log's bytes at `offset`, asked for by a recovering
    master (AskRefill)."""
    offset: int
    body: bytes


@dataclass
class Node:
    """A broker. Its log survives a crash (in S3 only what it flushed, see SimLog); its
    roles do not."""
    name: str
    log: SimLog = field(default_factory=SimLog)
    alive: bool = True
    master: HAMaster | None = None
    slave: HASlave | None = None
    link: int | None = None  # the slave's link to its master
    following: str | None = None  # the master node this slave follows
    slot: int | None = None  # the slave's id in the master's checkpoint (S3 only)
    follow_epoch: int = 0  # the epoch whose master the slave follows (S3)
    flushing: bool = False  # a flush of its log is under way (S3)
    incarnation: int = 0  # its crashes so far: a flush under way at a crash is lost


@dataclass
class Sent:
    """One producer send and what became of it."""
    number: int
    offset: int
    end: int
    epoch: int
    status: str = "WAIT"  # WAIT | OK | PENDING | DONE | RESEND | FAILED


class HAGroupSim(SlaveLinking, Simulation):
    INVARIANTS: ClassVar[dict[str, str]] = {
        "slave-prefix": "a slave's log is a prefix of the log of the master it follows",
        "logs-start-at-zero": "no slave is told to start anywhere but 0 (the simulated "
                              "logs are never cut by retention)",
        LIVENESS: "after every fault heals, a new send is acknowledged within 10 s",
    }
    CHECKPOINT = False  # HAMaster/HASlave run the S3 consistent checkpoint
    LOSES_UNFLUSHED = False  # a crash keeps only the flushed part of a log (S3)

    def __init__(self, seed: int, *, steps: int = 20_000, bugs=frozenset(),
                 replicas: int | None = None, trace_events: bool = False):
        super().__init__(seed, steps=steps, bugs=bugs, trace_events=trace_events)
        rng = self.rng
        self.names = [f"b{i}" for i in range(replicas or self._group_size())]
        self.nodes = {name: self._new_node(name) for name in self.names}
        self.ha_config = HAConfig(segment_size=rng.choice((512, 4096, 1 << 20)),
                                  heartbeat_ms=50, housekeeping_ms=400,
                                  sync_timeout_ms=rng.choice((60, 150, 400)),
                                  fallbehind_max=1 << 30, transfer_batch=rng.choice((64, 700)),
                                  window=rng.choice((300, 4096)), checkpoint=self.CHECKPOINT)
        self.net_links = Links(self.w)
        self.links = self.net_links.open  # id -> (slave, master)
        self.sent: dict[int, Sent] = {}
        self.tally = {"WAIT": 0, "OK": 0, "PENDING": 0}  # sends by status
        self._next_number = 0
        self.rids: dict[int, str] = {}  # sync request id (= message number) -> master
        self.acks_on_write = False  # ASYNC_MASTER: a send is OK once the master wrote it
        self.faults = 0
        self.ha_bug = self.bug_in(HA_BUGS)  # (the design's BUGS say which it accepts)
        self.slave_bug = self.bug_in(SLAVE_BUGS)
        self.flush_ms = rng.choice(FLUSH_MS) if self.CHECKPOINT else (0, 0)
        self._ticks = {name: Tick(name) for name in self.names}

    # ---- what a design decides ---------------------------------------------------------
    def _group_size(self) -> int:
        raise NotImplementedError

    def _new_node(self, name: str) -> Node:
        return Node(name)

    def _start_roles(self) -> None:
        raise NotImplementedError

    def _rejoin(self, node: Node) -> None:
        """A restarted broker takes up a role again."""
        raise NotImplementedError

    def _can_write(self, node: Node) -> bool:
        return node.master is not None and not node.master.recovering

    def _epoch(self, node: Node) -> int:
        return 0

    def _recover_ms(self, node: Node) -> int | None:
        """How long a new master waits for its slaves to refill it (S2)."""
        return None

    def _waits_for_a_slave(self) -> bool:
        """Whether a recovering master also waits, past that time, for a slave to report."""
        return True

    def _damage(self, node: Node) -> None:
        """What a crash does to a node's log (beyond what LOSES_UNFLUSHED says)."""

    def _on_recovered(self, node: Node) -> None:
        """A restarted master finished its refill and takes writes: check what it holds."""

    def _on_acked(self, node: Node, s: Sent) -> None:
        """A send was just acknowledged by `node`: check what that promises."""

    def _timed_out(self, node: Node, s: Sent) -> None:
        self._set_status(s, "FAILED")

    def _pushable(self, node: Node) -> int:
        """How far a master's slaves may be sent its log."""
        return node.log.end

    def _save_checkpoint(self, node: Node, a: SaveCheckpoint) -> None:
        raise AssertionError(f"{node.name}: a consistent checkpoint outside S3")

    def _victim(self, name: str) -> str:
        """The broker to crash, given a live one drawn at random."""
        return name

    def _partition_targets(self) -> list[str]:
        """Who a partition may cut off from all the others."""
        return self.names

    def _fault_control_plane(self) -> bool:
        """Crash the control plane, if the design has one that is up."""
        return False

    def _on_message(self, node: Node, msg) -> None:
        """A message other than the HA link's own reached a live broker."""

    def _on_outside(self, ev: LinkDeliver) -> None:
        """A message reached something other than a broker."""

    # ---- roles ----------------------------------------------------------------------
    def start(self) -> None:
        self._start_roles()
        for name in self.names:
            self.w.at(TICK_MS, self._ticks[name])
        self.w.at(50, CLIENT)
        self.w.at(self.rng.randint(200, 600), FAULT)

    def _lead(self, name: str, checkpoint: int = 0, members: tuple = ()) -> None:
        node = self.nodes[name]
        self._unfollow(node)
        node.master = HAMaster(self.ha_config, self._pushable(node), self.w.now,
                               checkpoint=checkpoint, members=dict(members),
                               epoch=self._epoch(node), recover_ms=self._recover_ms(node),
                               had_slaves=self._waits_for_a_slave(), bug=self.ha_bug)
        self.w.log(f"{name} leads (log end {node.log.end})")

    def _follow(self, name: str, master: str) -> None:
        node = self.nodes[name]
        self._step_down(node)
        self._unfollow(node)
        node.following, node.follow_epoch = master, self._epoch(node)
        node.slave = HASlave(self.ha_config, node.log.end, self.w.now, reconnect_ms=50,
                             flushed=node.log.flushed, bug=self.slave_bug)

    def _step_down(self, node: Node) -> None:
        """No longer a master: its slaves' links close (they must not take its tail)."""
        node.master = None
        for link, (_, m) in list(self.links.items()):
            if m == node.name:
                self.net_links.close(link, f"{m} is no longer master")

    def _unfollow(self, node: Node) -> None:
        if node.link is not None:
            self.net_links.close(node.link, "stops following")
        node.slave = None
        node.following = None

    def _connect(self, node: Node) -> None:
        self._link_to(node, self.nodes.get(node.following or ""))

    # ---- the drivers: carry out what the cores ask -------------------------------------
    def _run_master(self, node: Node, actions: list) -> None:
        to_slave = self.net_links.to_slave
        for a in actions:
            if isinstance(a, Transfer):
                to_slave(node.name, a.link,
                         Frame(a.offset, a.size, node.log.read(a.offset, a.offset + a.size)))
            elif isinstance(a, Heartbeat):
                to_slave(node.name, a.link, Frame(a.offset, 0, b""))
            elif isinstance(a, PublishCheckpoint):
                to_slave(node.name, a.link, Frame(a.checkpoint, -1, b""))
            elif isinstance(a, Close):
                self.net_links.close(a.link, a.reason)
            elif isinstance(a, SaveCheckpoint):
                self._save_checkpoint(node, a)
            elif isinstance(a, Complete):
                self._completed(node, a)
            elif isinstance(a, AskRefill):
                to_slave(node.name, a.link, Frame(a.offset, REFILL_FRAME,
                                                  DIGEST.pack(self._tail(node, a.offset))))
            elif isinstance(a, RefillAppend):
                end = node.log.append_prefix(a.offset, a.data)
                self._run_master(node, node.master.refill_appended(end, self.w.now))
            elif isinstance(a, Recovered):
                self.w.log(f"{node.name} recovered (log end {a.log_end}): takes writes")
                self._on_recovered(node)

    def _run_slave(self, node: Node, actions: list) -> None:
        for a in actions:
            if isinstance(a, Report):
                digest = self._tail(node, a.offset) if a.hello else None
                report = SlaveReport(a.offset, node.slot, node.follow_epoch, digest)
                self.net_links.to_master(node.name, node.link, report)
            elif isinstance(a, Append):
                end = node.log.append_prefix(a.offset, a.data)
                self._check_prefix(node)
                self._run_slave(node, node.slave.appended(end, self.w.now))
            elif isinstance(a, StartAt):
                raise Violation("logs-start-at-zero", f"{node.name} told to start at {a.offset}")
            elif isinstance(a, Disconnect):
                if node.link is not None:
                    self.net_links.close(node.link, a.reason)
                node.link = None
            elif isinstance(a, Connect):
                self._connect(node)
            elif isinstance(a, Flush):
                self._flush(node)
            elif isinstance(a, StoreCheckpoint):
                pass  # the slave's copy of the checkpoint: nothing the checks read
            elif isinstance(a, SendLog):
                step = self.ha_config.transfer_batch
                for at in range(a.offset, a.end, step):
                    chunk = RefillChunk(at, node.log.read(at, min(a.end, at + step)))
                    self.net_links.to_master(node.name, node.link, chunk)

    @staticmethod
    def _tail(node: Node, offset: int) -> int:
        return tail_digest(node.log.read(max(0, offset - TAIL_BYTES), offset))

    def _forked(self, node: Node, offset: int, digest: int) -> bool:
        """Whether `node` holds `offset` with other bytes before it than the peer whose
        tail digest this is (the drivers' fork check; see replication/ha/actions.py)."""
        return "no-fork-check" not in self.bugs and offset <= node.log.end and \
            self._tail(node, offset) != digest

    def _flush(self, node: Node) -> None:
        """Start a group-commit flush of the node's log, unless one is under way."""
        if not node.flushing:
            node.flushing = True
            self.w.at(self.rng.randint(*self.flush_ms), FlushDone(node.name, node.incarnation))

    def on_flush_done(self, ev: FlushDone) -> None:
        node = self.nodes[ev.node]
        if not node.alive or ev.incarnation != node.incarnation:
            return  # crashed meanwhile: the flush never finished
        node.flushing = False
        node.log.flush()  # (an fsync covers what was written before it ran: all of it here)
        if node.master is not None:
            self._run_master(node, node.master.appended(self._pushable(node), self.w.now))
        if node.slave is not None:
            self._run_slave(node, node.slave.flushed_to(node.log.flushed, self.w.now))

    def _completed(self, node: Node, a: Complete) -> None:
        number = a.request_id
        del self.rids[number]
        s = self.sent[number]
        if a.status is SyncStatus.OK:
            self._acked(node, s)
        elif a.status is SyncStatus.TIMEOUT:
            self._timed_out(node, s)
        else:
            self._set_status(s, "FAILED")

    def _acked(self, node: Node, s: Sent) -> None:
        self._set_status(s, "OK")
        self._on_acked(node, s)

    def _set_status(self, s: Sent, status: str) -> None:
        assert s.status != "OK", f"message {s.number} was acknowledged, then {status}"
        self.tally[s.status] -= 1
        self.tally[status] = self.tally.get(status, 0) + 1
        s.status = status

    # ---- producers ------------------------------------------------------------------
    def _writable_master(self) -> Node | None:
        for node in self.nodes.values():
            if node.alive and node.master is not None and self._can_write(node):
                return node
        return None

    def on_client(self, _: Client) -> None:
        node = self._writable_master()
        if node is not None:
            number = self._next_number
            self._next_number += 1
            payload = self.rng.randbytes(self.rng.randint(1, 120))
            off, end = node.log.append(number, payload)
            s = self.sent[number] = Sent(number, off, end, self._epoch(node))
            self.tally["WAIT"] += 1
            if self.CHECKPOINT:
                self._flush(node)  # the master's group commit
            actions = node.master.appended(self._pushable(node), self.w.now)
            if self.acks_on_write:
                self._set_status(s, "OK")
            else:
                self.rids[number] = node.name
                actions += node.master.sync(number, end, self.w.now)
            self._run_master(node, actions)
        self.w.at(self.rng.randint(5, 40), CLIENT)

    # ---- checks ---------------------------------------------------------------------
    def _check_prefix(self, node: Node) -> None:
        m = self.nodes[node.following]
        n = node.log.end
        if n > m.log.end or node.log.data != m.log.data[:n]:
            raise Violation("slave-prefix", f"{node.name}'s log (end {n}) is not a prefix of "
                            f"its master {m.name}'s (end {m.log.end})")

    # ---- events ---------------------------------------------------------------------
    def on_tick(self, ev: Tick) -> None:
        node = self.nodes[ev.node]
        if not node.alive:
            return
        if node.master is not None:
            self._run_master(node, node.master.tick(self.w.now))
        if node.slave is not None:
            self._run_slave(node, node.slave.tick(self.w.now))
        self.w.at(TICK_MS, ev)

    def on_link_deliver(self, ev: LinkDeliver) -> None:
        node = self.nodes.get(ev.dst)
        if node is None:
            self._on_outside(ev)
            return
        link, msg = ev.link, ev.msg
        if not node.alive or (link is not None and link not in self.links):
            return  # a dead broker, or a link closed while this was in flight
        if isinstance(msg, SlaveReport):
            if msg.digest is not None and self._forked(node, msg.offset, msg.digest):
                self.net_links.close(link, f"{node.name}: the slave's log forks from ours")
                return
            if node.master is not None:
                self._run_master(node, node.master.report(link, msg.offset, self.w.now,
                                                          msg.slot, epoch=msg.epoch))
        elif isinstance(msg, RefillChunk):
            if node.master is not None:
                self._run_master(node, node.master.refill_data(link, msg.offset, msg.body,
                                                               self.w.now))
        elif isinstance(msg, Frame):
            if msg.size == REFILL_FRAME and \
                    self._forked(node, msg.offset, DIGEST.unpack(msg.body)[0]):
                self.net_links.close(link, f"{node.name}: the master's log forks from ours")
                return
            if node.slave is not None and link == node.link:
                self._run_slave(node, node.slave.frame(msg.offset, msg.size, msg.body,
                                                       self.w.now))
        else:
            self._on_message(node, msg)

    def on_link_closed(self, ev: LinkClosed) -> None:
        node = self.nodes[ev.node]
        if not node.alive:
            return
        if node.master is not None:
            node.master.disconnected(ev.link)
        if node.slave is not None and node.link == ev.link:
            node.link = None
            node.slave.disconnected(self.w.now)

    # ---- faults ---------------------------------------------------------------------
    def on_fault(self, _: Fault) -> None:
        if not self.faulting:
            return
        w, rng = self.w, self.rng
        self.faults += 1
        choice = rng.random()
        victims = [n for n in self.names if self.nodes[n].alive]
        if choice < 0.45 and victims:
            name = self._victim(rng.choice(victims))
            self._crash(name)
            self._restart_later(name)
        elif choice < 0.65:
            name = rng.choice(self._partition_targets())
            w.partition([{name}, {n for n in self._partition_targets() if n != name}])
            w.log(f"{name} partitioned")
            w.at(rng.randint(100, 1000), HEAL)
        elif choice < 0.8 and self._fault_control_plane():
            pass
        else:
            w.net.max_delay_ms = rng.choice((5, 30, 120))
            w.log(f"network delays up to {w.net.max_delay_ms} ms")
        w.at(rng.randint(200, 900), FAULT)

    def on_heal(self, _: Heal) -> None:
        self.w.net.heal()
        self.w.log("partitions healed")

    def _crash(self, name: str) -> None:
        node = self.nodes[name]
        if not node.alive:
            return
        node.alive = False
        node.incarnation += 1
        node.flushing = False
        lost = node.log.lose_unflushed() if self.LOSES_UNFLUSHED else 0
        self._damage(node)
        self.w.log(f"{name} crashed (log end {node.log.end}, {lost} unflushed bytes lost)")
        self.net_links.close_all(name, f"{name} crashed")
        if node.master is not None:  # its waiting sends will never be answered
            self.rids = {r: m for r, m in self.rids.items() if m != name}
        node.master = node.slave = None
        node.link = node.following = None

    def _restart_later(self, name: str) -> None:
        """A crashed broker comes back (some time) later."""
        self.w.at(self.rng.randint(100, 1500), Restart(name))

    def on_restart(self, ev: Restart) -> None:
        node = self.nodes[ev.node]
        if node.alive:
            return
        node.alive = True
        self.w.log(f"{node.name} restarts (log end {node.log.end})")
        self._rejoin(node)
        self.w.at(TICK_MS, self._ticks[node.name])

    # ---- settling -------------------------------------------------------------------
    def recover(self) -> None:
        for name in self.names:
            self.on_restart(Restart(name))

    def check_liveness(self) -> None:
        tally, before = self.tally, self.tally["OK"]  # (an OK send stays OK)
        self.wait_for(lambda: tally["OK"] > before and not tally["PENDING"])
        if tally["OK"] == before:
            raise Violation(LIVENESS, "after every fault healed, no send was acknowledged "
                            "within 10 s")

    def stats(self) -> dict:
        return {"nodes": len(self.names), "faults": self.faults,
                "sent": {status: n for status, n in self.tally.items() if n}}
