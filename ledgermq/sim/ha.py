"""Classic HA (S2: sync / async master) and the checkpoint + control node scheme (S3) in
the simulator: the real HAMaster / HASlave / GroupControl / CheckpointReplica objects, TCP
links that keep order and can be cut, node crashes and restarts, partitions, a control
node that crashes too, producers sending throughout and resolving PENDING, and a checker
after every step.

The simulated log is a flat byte string of records (4-byte size, 4-byte message number,
payload); a node's log survives its crash (slaves and masters flush before they report
or answer, as SYNC_FLUSH brokers do).
"""
from __future__ import annotations

import copy
import struct
from dataclasses import dataclass, field

from ..replication.checkpoint import (
    AnswerPromotion, CheckpointReplica, ControlConfig, Follow, GroupControl, GroupState, Lead,
    Promote, Replay, Resolution, SaveCache, SaveRole, SaveState, Stand, Truncate,
)
from ..replication.checkpoint import BUGS as CONTROL_BUGS
from ..replication.ha import (
    Append, Close, Complete, Connect, Disconnect, HAConfig, HAMaster, HASlave, Heartbeat,
    PublishCheckpoint, Report, SaveCheckpoint, StartAt, StoreCheckpoint, SyncStatus, Transfer,
)
from ..replication.ha import BUGS as HA_BUGS
from .links import Links
from .world import SimResult, Violation, World

REC = struct.Struct(">ii")
TICK_MS = 10
HEARTBEAT_MS = 100  # broker -> control node
MODES = ("sync", "async", "checkpoint")
BUGS = {**HA_BUGS, **CONTROL_BUGS}
CTL = "ctl"


class SimLog:
    def __init__(self):
        self.data = bytearray()

    @property
    def end(self) -> int:
        return len(self.data)

    def append(self, number: int, payload: bytes) -> tuple[int, int]:
        at = len(self.data)
        self.data += REC.pack(REC.size + len(payload), number) + payload
        return at, len(self.data)

    def append_prefix(self, offset: int, data: bytes) -> int:
        assert offset == len(self.data), (offset, len(self.data))
        pos = 0
        while pos + REC.size <= len(data):
            size = REC.unpack_from(data, pos)[0]
            if pos + size > len(data):
                break
            pos += size
        self.data += data[:pos]
        return len(self.data)

    def messages(self) -> dict[int, int]:
        """message number -> offset"""
        out, pos = {}, 0
        while pos < len(self.data):
            size, number = REC.unpack_from(self.data, pos)
            out[number] = pos
            pos += size
        return out


@dataclass
class Node:
    name: str
    log: SimLog = field(default_factory=SimLog)
    alive: bool = True
    master: HAMaster | None = None
    slave: HASlave | None = None
    link: int | None = None  # the slave's link to its master
    following: str | None = None  # the master node this slave follows
    replica: CheckpointReplica | None = None
    saved_role: tuple = (0, None)
    saved_checkpoint: tuple = (-1, 0, ())
    lead_epoch: int = 0
    slot: int = 0


@dataclass
class Sent:
    number: int
    offset: int
    end: int
    epoch: int
    status: str = "WAIT"  # WAIT | OK | PENDING | DONE | RESEND | FAILED


class HASim:
    def __init__(self, seed: int, *, mode: str = "sync", replicas: int | None = None,
                 steps: int = 20_000, bugs: frozenset[str] = frozenset()):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.w = World(seed)
        self.mode = mode
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        rng = self.w.rng
        n = replicas or (3 if mode == "checkpoint" else rng.choice((2, 3)))
        self.names = [f"b{i}" for i in range(n)]
        self.nodes = {name: Node(name) for name in self.names}
        self.max_steps = steps
        seg = rng.choice((512, 4096, 1 << 20))
        self.ha_config = HAConfig(segment_size=seg, heartbeat_ms=50, housekeeping_ms=400,
                                  sync_timeout_ms=rng.choice((60, 150, 400)),
                                  fallbehind_max=1 << 30, transfer_batch=rng.choice((64, 700)),
                                  window=rng.choice((300, 4096)),
                                  checkpoint=mode == "checkpoint")
        self.net_links = Links(self.w)
        self.links = self.net_links.open  # id -> (slave, master)
        self.sent: dict[int, Sent] = {}
        self._next_number = 0
        self.rids: dict[int, tuple[str, int]] = {}  # sync request id -> (master, message)
        self.faults = 0
        self.ctl: GroupControl | None = None
        self.ctl_alive = mode == "checkpoint"
        self.ctl_saved: tuple[dict | None, list] = (None, [])
        self.ctl_config = ControlConfig(master_timeout_ms=300)
        self.ctl_bug = next((b for b in sorted(bugs) if b in CONTROL_BUGS), None)
        self.ha_bug = next((b for b in sorted(bugs) if b in HA_BUGS), None)
        self.promotions = 0
        self.masters_seen: list[str] = []

    # ---- start ----------------------------------------------------------------------
    def start(self) -> None:
        now = self.w.now
        if self.mode == "checkpoint":
            self.ctl = GroupControl(self.ctl_config, now, bug=self.ctl_bug)
            self.w.at(0, "ctl_tick")
            for name in self.names:
                self.nodes[name].replica = CheckpointReplica()
                self.w.at(self.w.rng.randint(0, 50), "hb", name)
        else:
            self._lead(self.names[0], 0, 0, ())
            for name in self.names[1:]:
                self._follow(name, self.names[0])
        for name in self.names:
            self.w.at(TICK_MS, "tick", name)
        self.w.at(50, "client")
        self.w.at(self.w.rng.randint(200, 600), "fault")

    def _lead(self, name: str, epoch: int, checkpoint: int, members: tuple) -> None:
        node = self.nodes[name]
        self._unfollow(node)
        saved_epoch, saved_cp, saved_members = node.saved_checkpoint
        if saved_epoch == epoch:  # the same master restarted: its own record is newer
            checkpoint, members = max(checkpoint, saved_cp), saved_members or members
        node.master = HAMaster(self.ha_config, node.log.end, self.w.now,
                               checkpoint=checkpoint, members=dict(members), bug=self.ha_bug)
        node.lead_epoch = epoch
        self.masters_seen.append(name)
        self.w.log(f"{name} leads (log end {node.log.end})")

    def _follow(self, name: str, master: str) -> None:
        node = self.nodes[name]
        self._step_down(node)
        self._unfollow(node)
        node.following = master
        node.slave = HASlave(self.ha_config, node.log.end, self.w.now, reconnect_ms=50)

    def _step_down(self, node: Node) -> None:
        """No longer a master: its slaves' links close (they must not take its tail)."""
        node.master = None
        for link, (_, m) in list(self.links.items()):
            if m == node.name:
                self._close(link, f"{m} is no longer master")

    def _unfollow(self, node: Node) -> None:
        if node.link is not None:
            self._close(node.link, "stops following")
        node.slave = None
        node.following = None

    # ---- network --------------------------------------------------------------------
    def _send(self, src: str, dst: str, msg: tuple, link: int | None = None) -> None:
        self.net_links.send(src, dst, msg, link)

    def _close(self, link: int, reason: str) -> None:
        self.net_links.close(link, reason)

    def _connect(self, name: str) -> None:
        node = self.nodes[name]
        m = self.nodes.get(node.following or "")
        if m is None or not m.alive or m.master is None or (name, m.name) in self.w.net.blocked:
            node.slave.disconnected(self.w.now)
            return
        link = node.link = self.net_links.connect(name, m.name)
        self._run_master(m, m.master.connected(link, self.w.now))
        self._run_slave(node, node.slave.connected(self.w.now))

    # ---- the drivers ----------------------------------------------------------------
    def _run_master(self, node: Node, actions: list) -> None:
        for a in actions:
            if isinstance(a, Transfer):
                if a.link in self.links:
                    body = bytes(node.log.data[a.offset:a.offset + a.size])
                    slave = self.links[a.link][0]
                    self._send(node.name, slave, ("frame", a.offset, a.size, body), a.link)
            elif isinstance(a, Heartbeat):
                if a.link in self.links:
                    self._send(node.name, self.links[a.link][0], ("frame", a.offset, 0, b""),
                               a.link)
            elif isinstance(a, PublishCheckpoint):
                if a.link in self.links:
                    self._send(node.name, self.links[a.link][0],
                               ("frame", a.checkpoint, -1, b""), a.link)
            elif isinstance(a, Close):
                self._close(a.link, a.reason)
            elif isinstance(a, SaveCheckpoint):
                self._check_checkpoint(node, a.checkpoint)
                node.saved_checkpoint = (node.lead_epoch, a.checkpoint, a.members)
            elif isinstance(a, Complete):
                self._completed(node, a)

    def _run_slave(self, node: Node, actions: list) -> None:
        for a in actions:
            if isinstance(a, Report):
                if node.link in self.links:
                    self._send(node.name, self.links[node.link][1],
                               ("report", a.offset, node.slot), node.link)
            elif isinstance(a, Append):
                end = node.log.append_prefix(a.offset, a.data)
                self._check_prefix(node)
                self._run_slave(node, node.slave.appended(end, self.w.now))
            elif isinstance(a, StartAt):
                raise Violation(f"{node.name}: the simulated logs all start at 0")
            elif isinstance(a, Disconnect):
                if node.link is not None:
                    self._close(node.link, a.reason)
                node.link = None
            elif isinstance(a, Connect):
                self._connect(node.name)
            elif isinstance(a, StoreCheckpoint):
                pass

    def _completed(self, node: Node, a: Complete) -> None:
        _, number = self.rids.pop(a.request_id)
        s = self.sent[number]
        if a.status is SyncStatus.OK:
            self._acked(node, s)
        elif a.status is SyncStatus.TIMEOUT and self.mode == "checkpoint":
            data = bytes(node.log.data[s.offset:s.end])
            self._send(node.name, CTL, ("cache", node.name, s.epoch, s.offset, s.end,
                                        str(number), data))
        else:
            s.status = "FAILED"

    def _acked(self, node: Node, s: Sent) -> None:
        s.status = "OK"
        if self.mode == "sync":
            # S2: a SEND_OK message is on a slave when it is acknowledged
            for other in self.nodes.values():
                if other is not node and other.log.data[s.offset:s.end] == \
                        node.log.data[s.offset:s.end]:
                    return
            raise Violation(f"message {s.number} acknowledged by {node.name} but no slave "
                            f"holds [{s.offset}, {s.end})")

    # ---- S3: the brokers' side of the control node ---------------------------------
    def _heartbeat(self, name: str) -> None:
        node = self.nodes[name]
        r = node.replica
        cp, members = (node.master.checkpoint, list(node.master.members)) if node.master \
            else (0, None)
        wants = name == self.names[0]
        self._send(name, CTL, ("hb", name, wants, r.epoch, node.log.end, cp, members))

    def _run_replica(self, node: Node, actions: list) -> None:
        for a in actions:
            if isinstance(a, Stand):
                self._step_down(node)
                self._unfollow(node)
            elif isinstance(a, Truncate):
                self.w.log(f"{node.name} truncates {node.log.end} -> {a.offset}")
                del node.log.data[a.offset:]
            elif isinstance(a, SaveRole):
                node.saved_role = (a.epoch, a.promotion)
            elif isinstance(a, Follow):
                node.slot = a.slot
                self._follow(node.name, a.master_addr)
            elif isinstance(a, Lead):
                node.slot = a.slot
                self._lead(node.name, a.epoch, a.checkpoint, a.members)
                self._check_new_master(node)
            elif isinstance(a, Replay):
                moved = []
                for c in a.promote.replay:
                    if c.end > a.takeover:
                        number = REC.unpack_from(c.data, 0)[1]
                        off, end = node.log.append(number, c.data[REC.size:])
                        moved.append((c.offset, off, end))
                self.w.log(f"{node.name} took over at {a.takeover}, replayed {len(moved)}")
                self._run_replica(node, node.replica.replayed(moved, node.log.end))
            elif isinstance(a, AnswerPromotion):
                p = a.promotion
                self._send(node.name, CTL, ("promoted", node.name, node.slot, p.epoch,
                                            p.takeover, list(p.replayed), p.log_end))

    def _run_ctl(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, SaveState):
                self.ctl_saved = (copy.deepcopy(a.state), self.ctl_saved[1])
            elif isinstance(a, SaveCache):
                self.ctl_saved = (self.ctl_saved[0], copy.deepcopy(self.ctl.cache))
            elif isinstance(a, Promote):
                self.w.log(f"ctl promotes {a.addr} to epoch {a.epoch}")
                self._send(CTL, a.addr, ("promote", a))

    def _on_ctl(self, msg: tuple) -> None:
        kind = msg[0]
        ctl = self.ctl
        if kind == "hb":
            _, name, wants, epoch, end, cp, members = msg
            view, actions = ctl.heartbeat(name, wants, epoch, end, self.w.now, cp, members)
            self._run_ctl(actions)
            self._send(CTL, name, ("view", view))
        elif kind == "cache":
            _, name, epoch, offset, end, msg_id, data = msg
            ok, actions = ctl.cache_message(epoch, offset, end, msg_id, data)
            self._run_ctl(actions)
            self._send(CTL, name, ("cached", int(msg_id), ok))
        elif kind == "promoted":
            _, name, slot, epoch, takeover, moved, log_end = msg
            self._run_ctl(ctl.promoted(slot, epoch, takeover, moved, log_end))
            if ctl.state.master == slot:
                self.promotions += 1
                self._send(CTL, name, ("view", ctl.view(slot)))
        elif kind == "resolve":
            _, number, epoch, end = msg
            self._send(CTL, "client", ("resolved", number, ctl.resolve(epoch, end, str(number))))

    def _on_broker(self, node: Node, link: int | None, msg: tuple) -> None:
        kind = msg[0]
        now = self.w.now
        if link is not None and link not in self.links:
            return  # the link was closed while this was in flight
        if kind == "report" and node.master is not None:
            self._run_master(node, node.master.report(link, msg[1], now,
                                                      msg[2] if self.mode == "checkpoint"
                                                      else None))
        elif kind == "frame" and node.slave is not None and link == node.link:
            self._run_slave(node, node.slave.frame(msg[1], msg[2], msg[3], now))
        elif kind == "view" and node.replica is not None:
            self._run_replica(node, node.replica.on_view(msg[1], node.log.end))
        elif kind == "promote" and node.replica is not None:
            self._run_replica(node, node.replica.on_promote(msg[1], node.log.end))
        elif kind == "cached":
            s = self.sent[msg[1]]
            if msg[2]:
                self._acked(node, s)
            else:
                s.status = "PENDING"
                self.w.at(50, "resolve", s.number)

    # ---- clients --------------------------------------------------------------------
    def _writable_master(self) -> Node | None:
        for node in self.nodes.values():
            if node.alive and node.master is not None:
                if self.mode != "checkpoint" or node.replica.role == "MASTER":
                    return node
        return None

    def _client(self) -> None:
        node = self._writable_master()
        if node is not None:
            number = self._next_number
            self._next_number += 1
            payload = self.w.rng.randbytes(self.w.rng.randint(1, 120))
            off, end = node.log.append(number, payload)
            epoch = node.replica.epoch if node.replica else 0
            s = self.sent[number] = Sent(number, off, end, epoch)
            actions = node.master.appended(end, self.w.now)
            if self.mode == "async":
                s.status = "OK"
            else:
                self.rids[number] = (node.name, number)
                actions += node.master.sync(number, end, self.w.now)
            self._run_master(node, actions)
        self.w.at(self.w.rng.randint(5, 40), "client")

    def _resolved(self, number: int, res: Resolution) -> None:
        s = self.sent[number]
        if s.status != "PENDING":
            return
        if res is Resolution.UNKNOWN:
            self.w.at(50, "resolve", number)
            return
        s.status = res.value
        if res is Resolution.RESEND:
            master = self._current_master()
            if master is not None and number in master.log.messages():
                raise Violation(f"message {number} resolved RESEND but the master "
                                f"{master.name} holds it")

    def _current_master(self) -> Node | None:
        st = self.ctl.state if self.ctl else None
        if st is None or st.master is None:
            return None
        name = next((a for a, s in st.slots.items() if s == st.master), None)
        return self.nodes.get(name)

    # ---- checks ---------------------------------------------------------------------
    def _check_prefix(self, node: Node) -> None:
        """A slave's log is a prefix of the master it follows."""
        m = self.nodes[node.following]
        n = node.log.end
        if n > m.log.end or node.log.data != m.log.data[:n]:
            raise Violation(f"{node.name}'s log (end {n}) is not a prefix of its master "
                            f"{m.name}'s (end {m.log.end})")

    def _check_checkpoint(self, master: Node, checkpoint: int) -> None:
        """The checkpoint never exceeds what any member slave holds of this lineage."""
        for sid, _ in master.master.members.items():
            holder = next((n for n in self.nodes.values() if n.slot == sid), None)
            if holder is None or holder is master:
                continue
            if holder.log.end < checkpoint or \
                    holder.log.data[:checkpoint] != master.log.data[:checkpoint]:
                raise Violation(f"checkpoint {checkpoint} of {master.name} exceeds what member "
                                f"{holder.name} holds (log end {holder.log.end})")

    def _check_new_master(self, node: Node) -> None:
        """Every acknowledged message (incl. those only the control node saved) and every
        PENDING one resolved DONE is on a new master."""
        have = node.log.messages()
        for s in self.sent.values():
            if s.status in ("OK", "DONE") and s.number not in have:
                raise Violation(f"new master {node.name} lacks message {s.number} "
                                f"({s.status}, sent at [{s.offset}, {s.end}) epoch {s.epoch})")

    # ---- faults ---------------------------------------------------------------------
    def _fault(self) -> None:
        w = self.w
        rng = w.rng
        self.faults += 1
        choice = rng.random()
        victims = [n for n in self.names if self.nodes[n].alive]
        if choice < 0.45 and victims:
            name = rng.choice(victims)
            if self.mode == "checkpoint" and rng.random() < 0.5 \
                    and self._current_master() is not None:
                name = self._current_master().name  # masters are the interesting victims
            self._crash(name)
            w.at(rng.randint(100, 1500), "restart", name)
        elif choice < 0.65:
            name = rng.choice(self.names + ([CTL] if self.mode == "checkpoint" else []))
            others = [n for n in self.names + [CTL] if n != name]
            w.partition([{name}, set(others)])
            w.log(f"{name} partitioned")
            w.at(rng.randint(100, 1000), "heal")
        elif choice < 0.8 and self.mode == "checkpoint" and self.ctl_alive:
            self.ctl_alive = False
            w.log("control node crashed")
            w.at(rng.randint(100, 1000), "ctl_restart")
        else:
            w.net.loss = 0.0
            w.net.max_delay_ms = rng.choice((5, 30, 120))
            w.log(f"network delays up to {w.net.max_delay_ms} ms")
        w.at(rng.randint(200, 900), "fault")

    def _crash(self, name: str) -> None:
        node = self.nodes[name]
        if not node.alive:
            return
        node.alive = False
        self.w.log(f"{name} crashed (log end {node.log.end})")
        self.net_links.close_all(name, f"{name} crashed")
        if node.master is not None:
            self.rids = {r: v for r, v in self.rids.items() if v[0] != name}
        node.master = node.slave = None
        node.link = node.following = None

    def _restart(self, name: str) -> None:
        node = self.nodes[name]
        if node.alive:
            return
        node.alive = True
        self.w.log(f"{name} restarts (log end {node.log.end})")
        if self.mode == "checkpoint":
            node.replica = CheckpointReplica(*node.saved_role)
            self.w.at(1, "hb", name)
        elif name == self.names[0]:
            self._lead(name, 0, 0, ())
        else:
            self._follow(name, self.names[0])
        self.w.at(TICK_MS, "tick", name)

    # ---- the loop -------------------------------------------------------------------
    def handle(self, kind: str, payload) -> None:
        w = self.w
        now = w.now
        if kind == "tick":
            node = self.nodes[payload]
            if not node.alive:
                return
            if node.master is not None:
                self._run_master(node, node.master.tick(now))
            if node.slave is not None:
                self._run_slave(node, node.slave.tick(now))
            w.at(TICK_MS, "tick", payload)
        elif kind == "deliver":
            dst, link, msg = payload
            if dst == CTL:
                if self.ctl_alive:
                    self._on_ctl(msg)
            elif dst == "client":
                self._resolved(msg[1], msg[2])
            elif self.nodes[dst].alive:
                self._on_broker(self.nodes[dst], link, msg)
        elif kind == "closed":
            name, link = payload
            node = self.nodes[name]
            if not node.alive:
                return
            if node.master is not None:
                node.master.disconnected(link)
            if node.slave is not None and node.link == link:
                node.link = None
                node.slave.disconnected(now)
        elif kind == "hb":
            if self.nodes[payload].alive:
                self._heartbeat(payload)
                w.at(HEARTBEAT_MS, "hb", payload)
        elif kind == "ctl_tick":
            if self.ctl_alive:
                self._run_ctl(self.ctl.tick(now))
            w.at(TICK_MS, "ctl_tick")
        elif kind == "ctl_restart":
            state, cache = self.ctl_saved
            self.ctl = GroupControl(self.ctl_config, now,
                                    GroupState.from_json(state) if state else None,
                                    copy.deepcopy(cache), bug=self.ctl_bug)
            self.ctl_alive = True
            w.log("control node restarted")
        elif kind == "client":
            self._client()
        elif kind == "resolve":
            s = self.sent[payload]
            self._send("client", CTL, ("resolve", s.number, s.epoch, s.end))
        elif kind == "fault":
            if w.steps < self.max_steps * 0.7:
                self._fault()
        elif kind == "restart":
            self._restart(payload)
        elif kind == "heal":
            w.net.heal()
            w.log("partitions healed")

    def run(self) -> SimResult:
        self.start()
        try:
            self.w.run_until(lambda: False, self.handle, self.max_steps)
            self._settle()
        except Violation as e:
            return SimResult(self.w.seed, False, self.w.steps, self.w.now, str(e),
                             list(self.w.trace), self.stats())
        return SimResult(self.w.seed, True, self.w.steps, self.w.now, stats=self.stats())

    def _settle(self) -> None:
        """Heal everything, restart everyone; a new send must then be acknowledged."""
        w = self.w
        w.net.heal()
        w.net.max_delay_ms = 10
        for name in self.names:
            self._restart(name)
        if self.mode == "checkpoint" and not self.ctl_alive:
            self.handle("ctl_restart", None)
        before = {n for n, s in self.sent.items() if s.status == "OK"}
        deadline = w.now + 10_000
        w.run_until(lambda: w.now > deadline or (
            {n for n, s in self.sent.items() if s.status == "OK"} - before
            and not any(s.status == "PENDING" for s in self.sent.values())),
            self.handle, w.steps + 200_000)
        if not ({n for n, s in self.sent.items() if s.status == "OK"} - before):
            raise Violation("after every fault healed, no send was acknowledged within 10 s")
        master = self._writable_master()
        if master is not None and self.mode == "checkpoint":
            self._check_new_master(master)

    def stats(self) -> dict:
        statuses: dict[str, int] = {}
        for s in self.sent.values():
            statuses[s.status] = statuses.get(s.status, 0) + 1
        return {"mode": self.mode, "nodes": len(self.names), "faults": self.faults,
                "sent": statuses, "promotions": self.promotions}
