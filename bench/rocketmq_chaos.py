"""Apache RocketMQ under ledgermq's chaos harness (#34): its DLedger and controller layouts
(`rocketmq_layouts.on_hosts`, every process on a test host of its own, named as ledgermq's
layout names them) under the same seeded schedule, workload (ledgermq's client and
RocketMQ's C++ client, one message a request, no client retries), faults and checks as
`ledgermq chaos`, so one seed gives the same windows to both systems.

    python -m bench.rocketmq_chaos --modes dledger,controller --seeds 1,2,3 --out DIR \\
        [--duration 240] [--cpp-client PYTHON] [--systems ledgermq,rocketmq] [--faults ...]

The families: kill, pause, partition, slow, and combined in controller mode (the master and
the controller leader). The store faults (lost-writes, corrupt, disk-full) cut or fill
ledgermq's own files and have no RocketMQ counterpart here. Controller mode runs with
RocketMQ's tightest sane failure detection (`controller-tight` in the layouts), its best
case. Every process is stopped by the test net that started it (its PID).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.chaos_table import table
from bench.rocketmq_anchor import READY, node_command, wait_for_output
from bench.rocketmq_layouts import Node, on_hosts
from ledgermq.chaos.faults import Injector
from ledgermq.chaos.netns import TestNet
from ledgermq.chaos.runner import Options, System, run
from ledgermq.client.admin import Admin
from ledgermq.localcluster.cluster import pid_alive
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode

FAULTS = {"dledger": "kill,pause,partition,slow",
          "controller": "kill,pause,partition,slow,combined"}


class RocketMQSystem(System):
    name = "rocketmq"

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.net: TestNet | None = None

    def up(self, net: TestNet, mode: str, replicas: int, d: Path, groups: int, namesrvs: int,
           controllers: int) -> dict:
        hosts = self.hosts(mode, replicas, groups, namesrvs, controllers)
        self.net, self.nodes = net, {n.name: n for n in on_hosts(
            mode, d, hosts, lambda name: net.host(name).addr)}
        procs = {}
        for kind in ("namesrv", "controller", "broker"):  # each kind starts in parallel
            started = {n.name: self._popen(d, n) for n in self.nodes.values() if n.kind == kind}
            for name, p in started.items():
                self._ready(d, self.nodes[name], p)
            procs.update({name: p.pid for name, p in started.items()})
        state = {
            "system": "rocketmq", "mode": mode,
            "namesrv": ";".join(n.addr for n in self.nodes.values() if n.kind == "namesrv"),
            "controllerAddr": ";".join(n.addr for n in self.nodes.values()
                                       if n.kind == "controller"),
            "processes": [{"name": n.name, "kind": n.kind, "pid": procs[n.name],
                           "host": n.addr.split(":")[0], "port": int(n.addr.split(":")[1]),
                           "group": n.group or None} for n in self.nodes.values()]}
        (d / "cluster.json").write_text(json.dumps(state, indent=1))
        return state

    def _popen(self, d: Path, node: Node) -> subprocess.Popen:
        assert self.net is not None
        nd = d / node.name
        argv, env = node_command(node, nd)
        log = nd / "stdout.log"
        if log.exists():  # a restart: the last run's output kept beside it
            log.rename(nd / f"stdout.{time.time_ns()}.log")
        with open(log, "wb") as out:
            return self.net.host(node.name).popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                  cwd=nd, env=env)

    def _ready(self, d: Path, node: Node, p: subprocess.Popen) -> None:
        if node.kind in READY:
            wait_for_output(d / node.name / "stdout.log", READY[node.kind], p, 180)

    def restart(self, d: Path, name: str) -> int:
        """Start a killed process again (same configuration, same store); its new pid. Not
        waiting until it serves: a JVM's start on the loaded machine (20-60 s for a name
        server) would hold up the schedule and cut the next windows short."""
        node = self.nodes[name]
        p = self._popen(d, node)
        state = json.loads((d / "cluster.json").read_text())
        for proc in state["processes"]:
            if proc["name"] == name:
                proc["pid"] = p.pid
        (d / "cluster.json").write_text(json.dumps(state, indent=1))
        return p.pid

    def health(self, d: Path) -> tuple[bool, str]:
        """Every process alive and every group with a master in the name servers' routes."""
        state = json.loads((d / "cluster.json").read_text())
        down = [p["name"] for p in state["processes"] if not pid_alive(p["pid"])]
        groups = sorted({n.group for n in self.nodes.values() if n.group})
        masters = asyncio.run(masters_by_group(state["namesrv"]))
        parts = [f"{g}: master {masters.get(g, 'none')}" for g in groups]
        if down:
            parts.append("down: " + " ".join(down))
        return not down and all(g in masters for g in groups), "; ".join(parts)

    def injector(self, net: TestNet, d: Path) -> Injector:
        return RocketMQInjector(net, d, self)


async def masters_by_group(namesrv: str) -> dict[str, str]:
    """brokerName -> the master's address, as the first name server that answers says."""
    for ns in namesrv.split(";"):
        try:
            async with Admin(ns) as admin:
                return await admin.master_addrs()
        except Exception:  # noqa: BLE001 - that name server is down or cut: the next
            continue
    return {}


class RocketMQInjector(Injector):
    """ledgermq's injector, with a group's master read from the name servers, the controller
    leader from RocketMQ's controllers and a kill undone by starting the same java again."""

    def __init__(self, net: TestNet, d: Path, system: RocketMQSystem):
        super().__init__(net, d, None)  # type: ignore[arg-type]  # (no placement: restart)
        self.system = system

    def restart(self, name: str) -> int:
        return self.system.restart(self.d, name)

    def master_now(self, targets: list[str]) -> str | None:
        """The group's master as the name servers' routes say."""
        by_addr = self.by_addr()
        masters = asyncio.run(masters_by_group(self._state()["namesrv"]))
        found = [by_addr[a] for a in masters.values() if by_addr.get(a) in targets]
        return found[0] if found else None

    def masters_now(self) -> list[str]:
        by_addr = self.by_addr()
        try:
            masters = asyncio.run(masters_by_group(self._state()["namesrv"]))
        except Exception:  # noqa: BLE001 - no name server answered: unknown
            return []
        return sorted(by_addr[a] for a in masters.values() if a in by_addr)

    def controller_leader(self) -> str | None:
        """RocketMQ's controllers name their leader in CONTROLLER_GET_METADATA_INFO's header."""
        st = self._state()
        by_addr = self.by_addr()

        async def ask() -> str | None:
            client = RemotingClient()
            try:
                for addr in st["controllerAddr"].split(";"):
                    try:
                        r = await client.invoke(addr, RemotingCommand(
                            RequestCode.CONTROLLER_GET_METADATA_INFO), 1.0)
                    except Exception:  # noqa: BLE001 - that controller is down: the next
                        continue
                    leader = r.ext.get("controllerLeaderAddress")
                    if leader:
                        return by_addr.get(leader)
                return None
            finally:
                await client.close()
        return asyncio.run(ask())


def main(argv: list[str] | None = None) -> int:
    """Every mode and seed asked for, ledgermq's run then RocketMQ's (same faults, same
    schedule), into OUT/SYSTEM-MODE-SEED/; the table of them all at the end."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="dledger,controller")
    ap.add_argument("--seeds", default="1", help="space- or comma-separated")
    ap.add_argument("--systems", default="ledgermq,rocketmq")
    ap.add_argument("--faults", default=None, help="default: every family both can take")
    ap.add_argument("--duration", type=float, default=240.0)
    ap.add_argument("--interval", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--cpp-client", dest="cpp_python", default=None)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    systems = {"ledgermq": System, "rocketmq": RocketMQSystem}
    results, kept = [], True
    for mode in a.modes.split(","):
        if mode not in FAULTS:
            ap.error(f"--modes: dledger or controller, not {mode}")
        for seed in map(int, a.seeds.replace(",", " ").split()):
            for name in a.systems.split(","):
                o = Options(mode, a.faults or FAULTS[mode], a.duration, seed,
                            a.out / f"{name}-{mode}-{seed}", interval=a.interval, rate=a.rate,
                            cpp_python=a.cpp_python)
                res = run(o, log=lambda line: print(line, file=sys.stderr, flush=True),
                          system=systems[name]())
                kept &= res["promise_kept"]
                results.append(res)
                print(table(results[-1:]).splitlines()[-1], flush=True)
    print(table(results))
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
