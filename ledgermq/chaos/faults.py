"""Applying a schedule's fault windows to a cluster on test hosts, and undoing them: kill -9
(restarted when the window ends), SIGSTOP / SIGCONT, partitions and client cuts, slow links,
the combined kill of a master with the controller leader or the control node, and the
store faults of `store_faults` (lost unsynced writes, corrupt flushed bytes, a full disk).

Each window records evidence that the fault really took: the pids killed and the new ones,
the stopped state read back from /proc, a connection across a cut that did not get through,
the connect time through a slowed link. A harness that silently failed to apply a fault
would show it there."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..localcluster import cluster
from . import store_faults
from .netns import TestNet
from .schedule import Window

PROBE_S = 2.0  # a connection across a cut is given this long to get through (it must not)
HEAL_TRIES = 3  # after a heal, a connection gets through within this many tries
MASTER_WAIT_S = 15.0  # how long to look for a group's master when a fault starts


class NotSupported(RuntimeError):
    """A fault family the runner cannot apply yet."""


@dataclass
class Applied:
    """A window being applied: the nodes it hit, what shows it took, how to undo it."""
    window: Window
    nodes: list[str]
    evidence: dict = field(default_factory=dict)
    undo: Callable[[], dict] = lambda: {}


class Injector:
    def __init__(self, net: TestNet, d: Path, place: cluster.Placement):
        self.net, self.d, self.place = net, d, place

    # -- the cluster's state ------------------------------------------------------------
    def _state(self) -> dict:
        return json.loads((self.d / "cluster.json").read_text())

    def _proc(self, name: str) -> dict:
        return next(p for p in self._state()["processes"] if p["name"] == name)

    def by_addr(self) -> dict[str, str]:
        """Each process's name by its host:port."""
        return {f"{p['host']}:{p['port']}": p["name"] for p in self._state()["processes"]}

    def master(self, targets: list[str]) -> str | None:
        """Whichever of `targets` is master now; None if none is within MASTER_WAIT_S."""
        end = time.monotonic() + MASTER_WAIT_S
        while True:
            found = self.master_now(targets)
            if found or time.monotonic() > end:
                return found
            time.sleep(0.3)

    def master_now(self, targets: list[str]) -> str | None:
        """Whichever of `targets` the brokers say is master (None: none, or mid-failover)."""
        brokers = [t for t in targets if self._proc(t)["kind"] == "broker"]
        try:
            st = cluster.status(self.d)
        except Exception:  # noqa: BLE001 - a broker mid-failover: ask again
            return None
        for p in st["processes"]:
            if p["name"] in brokers and p.get("alive") and p.get("role") in cluster.MASTER_ROLES:
                return str(p["name"])
        return None

    def masters_now(self) -> list[str]:
        """Every broker the brokers say is master now (what a window hit: a master or a
        slave, for the recovery targets of #34)."""
        try:
            st = cluster.status(self.d)
        except Exception:  # noqa: BLE001 - mid-failover: unknown
            return []
        return sorted(str(p["name"]) for p in st["processes"]
                      if p.get("alive") and p.get("role") in cluster.MASTER_ROLES)

    def controller_leader(self) -> str | None:
        from ..controller.client import ControllerClient
        st = self._state()
        by_addr = self.by_addr()

        async def ask():
            async with ControllerClient(st["controllerAddr"], timeout=1.0) as c:
                return await c.metadata()
        try:
            for m in asyncio.run(ask()):
                if m.get("isLeader"):
                    return by_addr.get(m["address"])
        except Exception:  # noqa: BLE001 - no leader answered: the caller says so
            pass
        return None

    def control_node_leader(self) -> str | None:
        """The control node group's leader: the one node that serves CONTROL_STATUS."""
        from ..remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
        by_addr = self.by_addr()

        async def ask():
            client = RemotingClient()
            try:
                for addr in self._state()["controlNode"].split(";"):
                    try:
                        r = await client.invoke(addr, RemotingCommand(
                            RequestCode.CONTROL_STATUS), 1.0)
                    except Exception:  # noqa: BLE001 - down: ask the next
                        continue
                    if r.code == ResponseCode.SUCCESS:
                        return by_addr.get(addr)
            finally:
                await client.close()
            return None
        return asyncio.run(ask())

    def _pick(self, w: Window) -> tuple[list[str], dict]:
        """The nodes a window hits: `pick: master` resolved to the group's master now,
        `also` to the controller leader, the control node group's leader or the control
        node."""
        nodes = list(w.targets)
        note: dict = {"masters": self.masters_now()}  # before the fault, as it starts
        if w.params.get("pick") == "master":
            brokers = [t for t in nodes if self._proc(t)["kind"] == "broker"]
            m = self.master(brokers)
            note["master"] = m
            nodes = [m or brokers[0]]
            also = w.params.get("also")
            if also in ("controller-leader", "controlnode-leader"):
                kind = "controller" if also == "controller-leader" else "control"
                leader = self.controller_leader() if kind == "controller" \
                    else self.control_node_leader()
                note[also.replace("-", "_")] = leader
                nodes.append(leader or next(t for t in w.targets
                                            if self._proc(t)["kind"] == kind))
            elif also:
                nodes.append(also)
        return nodes, note

    # -- applying -----------------------------------------------------------------------
    def apply(self, w: Window) -> Applied:
        nodes, note = self._pick(w)
        a = Applied(w, nodes, dict(note))
        if w.fault in store_faults.APPLY:
            store_faults.APPLY[w.fault](self, a)
        elif w.fault in ("kill", "combined"):
            self.kill(a)
        elif w.fault == "pause":
            self._pause(a)
        elif w.fault == "partition":
            self._partition(a)
        elif w.fault == "slow":
            self._slow(a)
        else:
            raise NotSupported(f"fault {w.fault} has no way to be applied")
        return a

    def kill(self, a: Applied) -> None:
        """kill -9 every node of `a`; undone by restarting them."""
        pids = {n: self._proc(n)["pid"] for n in a.nodes}
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 10
        while any(cluster.pid_alive(p) for p in pids.values()) and time.monotonic() < end:
            time.sleep(0.05)
        a.evidence.update(killed=pids, dead=[n for n, p in pids.items()
                                             if not cluster.pid_alive(p)])

        def restart() -> dict:
            out, errors = {}, {}
            for n in a.nodes:
                try:
                    out[n] = self.restart(n)
                except RuntimeError as e:
                    errors[n] = str(e)
            return {"restarted": out, **({"restart_errors": errors} if errors else {})}
        a.undo = restart

    def restart(self, name: str) -> int:
        """Start a killed node again, as it was started: its new pid."""
        return int(cluster.start(self.d, name, self.place)["pid"])

    def _pause(self, a: Applied) -> None:
        pids = {n: self._proc(n)["pid"] for n in a.nodes}
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
        end = time.monotonic() + 5  # a signal is delivered when the process next runs
        while any(_proc_state(p) not in ("T", None) for p in pids.values()) and \
                time.monotonic() < end:
            time.sleep(0.02)
        a.evidence.update(stopped=pids, state={n: _proc_state(p) for n, p in pids.items()})

        def resume() -> dict:
            for pid in pids.values():
                os.kill(pid, signal.SIGCONT)
            return {"state_after": {n: _proc_state(p) for n, p in pids.items()}}
        a.undo = resume

    def _partition(self, a: Applied) -> None:
        p, net = a.window.params, self.net
        shape = p["shape"]
        if shape == "isolate":
            net.isolate(a.nodes[0])
        elif shape == "split":
            net.partition(p["groups"])
        elif shape == "bridge":
            net.bridge(p["left"], p["right"], p["middle"])
        elif shape == "ring":
            net.ring(p["ring"])
        elif shape == "clients":
            net.cut_clients(*a.nodes)
        else:
            raise NotSupported(f"partition shape {shape} has no way to be applied")
        if shape == "clients":
            n = a.nodes[0]
            a.evidence["probe"] = {"from": "clients", "to": n,
                                   "reached": self._reach(None, n)}
        else:
            x, y = sorted(sorted(net.cuts, key=sorted)[0])
            a.evidence["probe"] = {"from": x, "to": y, "reached": self._reach(x, y)}
        a.evidence["cuts"] = len(net.cuts) + len(a.nodes if shape == "clients" else [])

        def heal() -> dict:
            net.heal()
            pr = a.evidence["probe"]
            src = None if pr["from"] == "clients" else pr["from"]
            # tried again after a failure: a first try failed fast once, on a loaded
            # machine, its reason not kept; each failed try's reason is kept now
            failed: list[str] = []
            while len(failed) < HEAL_TRIES:
                why = self._probe(src, pr["to"])
                if why is None:
                    break
                failed.append(why)
                time.sleep(0.5)  # a pause between tries (the schedule waits on this)
            return {"probe_after": len(failed) < HEAL_TRIES,
                    **({"probe_after_failed": failed} if failed else {})}
        a.undo = heal

    def _slow(self, a: Applied) -> None:
        p, n = a.window.params, a.nodes[0]
        before = self._connect_ms(n)
        self.net.slow(n, p["delay_ms"], p["jitter_ms"], p["loss_pct"], p["reorder_pct"],
                      p["seed"])
        # netem's reorder sends that share of packets at once, undelayed: the slowest of a
        # few connects shows the delay (every one of 4 lucky at 25%: 0.4%)
        a.evidence.update(connect_ms_before=before,
                          connect_ms=[self._connect_ms(n) for _ in range(4)])

        def unslow() -> dict:
            self.net.unslow(n)
            return {"connect_ms_after": self._connect_ms(n)}
        a.undo = unslow

    # -- probes -------------------------------------------------------------------------
    def _reach(self, src: str | None, dst: str) -> bool:
        """Whether a TCP connection from host `src` (None: the clients' side) to `dst`'s
        listening port gets through within PROBE_S."""
        return self._probe(src, dst) is None

    def _probe(self, src: str | None, dst: str) -> str | None:
        """`_reach`'s try: None when it got through, else why not."""
        proc = self._proc(dst)
        if src is None:
            return None if self._connect_ms(dst) is not None else "no connection"
        t = time.monotonic()
        r = self.net.host(src).run(
            ["timeout", PROBE_S, "bash", "-c", f"exec 3<>/dev/tcp/{proc['host']}/{proc['port']}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode == 0:
            return None
        return f"exit {r.returncode} after {time.monotonic() - t:.2f} s: {r.stderr.strip()}"

    def _connect_ms(self, dst: str) -> float | None:
        proc = self._proc(dst)
        t = time.monotonic()
        try:
            with socket.create_connection((proc["host"], proc["port"]), timeout=PROBE_S * 2):
                return round((time.monotonic() - t) * 1000, 1)
        except OSError:
            return None


def _proc_state(pid: int) -> str | None:
    """The state letter in /proc/PID/stat (T: stopped), None when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None
