"""`ledgermq chaos`: one run against one mode on test hosts. Lays the cluster out (every
process on its own host), runs the workload from the root side, applies the seeded fault
windows, heals, waits a quiet period, drains, checks, and writes `history.jsonl`,
`results.json` and `timeline.png` to the output directory.

A run replays from its seed: the same mode, faults, duration, interval and seed give the same
windows (what `pick: master` resolves to depends on the cluster at that moment)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..localcluster import cluster
from . import layout
from .checker import check, lost_ids, window_recovery
from .faults import Injector
from .history import HistoryWriter, load
from .netns import TestNet, available
from .schedule import parse_faults, plan
from .store_faults import small_disks
from .workload import Settings, Workload, create_topic

# What each mode's configuration (as `cluster up` writes it) promises an acknowledged send,
# and the faults it makes no promise against (family -> why).
PROMISES = {
    "dledger": (True, "SEND_OK once a majority of the Raft group has the entry: no loss "
                "while a majority survives", {}),
    "sync": (True, "SYNC_MASTER: SEND_OK once the slave has it; a restarted master refills "
             "from its slave what its disk lost before it takes a write (no automatic "
             "failover in classic HA)", {}),
    "async": (False, "ASYNC_MASTER promises nothing on failover: SEND_OK is the master's "
              "alone, a slave may lag; lost is reported, not held against it", {}),
    "checkpoint": (True, "SEND_OK once on the master's disk and a slave's (consistent "
                   "checkpoint, PENDING resolved by the control node)", {}),
    "controller": (True, "SEND_OK once every in-sync replica has it; the controller elects "
                   "only from the in-sync set", {}),
}
COORDINATED = {"controller", "checkpoint"}  # modes where `combined` has something to hit


def default_faults(mode: str) -> str:
    return "kill,pause,partition,slow,lost-writes,corrupt,disk-full" + (
        ",combined" if mode in COORDINATED else "")


class Unavailable(RuntimeError):
    """This machine cannot run test hosts (not root, no namespaces): the reason."""


class System:
    """The system under test on the test hosts: ledgermq (`cluster.up`'s layouts). Another
    system (bench/rocketmq_chaos.py: Apache RocketMQ) gives its own layout, start, health
    and injector; the schedule, workload and checks are the same."""
    name = "ledgermq"

    def hosts(self, mode: str, replicas: int, groups: int, namesrvs: int,
              controllers: int) -> dict[str, str]:
        return layout.hosts(mode, replicas, groups=groups, namesrvs=namesrvs,
                            controllers=controllers)

    def up(self, net: TestNet, mode: str, replicas: int, d: Path, groups: int, namesrvs: int,
           controllers: int) -> dict:
        """Start it; the state (cluster.json's: "namesrv", "processes") it wrote to `d`."""
        return layout.up_on(net, mode, replicas, d, groups=groups, namesrvs=namesrvs,
                            controllers=controllers)

    def health(self, d: Path) -> tuple[bool, str]:
        return cluster.health(cluster.status(d))

    def injector(self, net: TestNet, d: Path) -> Injector:
        return Injector(net, d, layout.placement(net))


@dataclass
class Options:
    mode: str
    faults: str
    duration: float
    seed: int
    out: Path
    groups: int = 2
    namesrvs: int = 2
    replicas: int | None = None  # dledger 3, the others 2
    interval: float = 20.0  # a window lasts half of it to all of it
    quiet: float | None = None  # the gap after a window (default: interval)
    final_quiet: float | None = None
    rate: float = 50.0
    cpp_python: str | None = None  # a Python with RocketMQ's C++ client: a second producer
    control_nodes: int = 3  # checkpoint mode: a control node group (1: a single node)


def run(o: Options, log=print, system: System | None = None) -> dict:
    """One run; the results (also in o.out/results.json). Raises Unavailable, NotSupported
    or ValueError before starting anything when the run cannot be made."""
    system = system or System()
    why = available()
    if why:
        raise Unavailable(why)
    if o.mode not in PROMISES:
        raise ValueError(f"unknown mode {o.mode!r} (known: {', '.join(PROMISES)})")
    faults = parse_faults(o.faults)
    replicas = o.replicas or (3 if o.mode == "dledger" else 2)
    controllers = 3 if o.mode == "controller" else o.control_nodes if o.mode == "checkpoint" \
        else 1
    nodes = system.hosts(o.mode, replicas, o.groups, o.namesrvs, controllers)
    windows = plan(o.seed, faults, nodes, o.duration, o.interval, quiet=o.quiet,
                   final_quiet=o.final_quiet)
    o.out.mkdir(parents=True, exist_ok=True)
    hist_path = o.out / "history.jsonl"
    hist_path.unlink(missing_ok=True)
    evidence: list[dict] = []
    brokers = [n for n, role in nodes.items() if role.startswith("broker")]
    disks = brokers if any(f.startswith("disk-full") for f in faults) else []
    with small_disks(o.out / "cluster", disks), TestNet(list(nodes)) as net:
        state = system.up(net, o.mode, replicas, o.out / "cluster", o.groups, o.namesrvs,
                          controllers)
        log(f"{system.name} {o.mode}: {len(state['processes'])} processes on test hosts, "
            f"name servers {state['namesrv']}")
        _wait_healthy(system, o.out / "cluster", 90)
        with HistoryWriter(hist_path) as h:
            h.meta(system=system.name, mode=o.mode, seed=o.seed, faults=faults,
                   duration=o.duration,
                   cpp_producer=bool(o.cpp_python),
                   groups=o.groups, namesrvs=o.namesrvs, replicas=replicas,
                   schedule=[w.to_json() for w in windows])
            evidence = _drive(o, system.injector(net, o.out / "cluster"), system, state, h,
                              windows, log)
    return _results(o, faults, windows, evidence, hist_path, replicas, system.name)


def _drive(o: Options, inj: Injector, system: System, state: dict, h: HistoryWriter, windows,
           log) -> list[dict]:
    """The workload on its own event-loop thread; the windows applied from here, on time."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="chaos-workload", daemon=True)
    thread.start()
    w = Workload(Settings(state["namesrv"], rate=o.rate, cpp_python=o.cpp_python), h)
    try:
        asyncio.run_coroutine_threadsafe(create_topic(state["namesrv"], 4), loop).result(90)
        ready = threading.Event()

        async def start():
            started = asyncio.Event()
            task = asyncio.ensure_future(w.run(started))
            await started.wait()
            ready.set()
            return task
        task = asyncio.run_coroutine_threadsafe(start(), loop).result(90)
        t0 = time.monotonic()
        out: list[dict] = []
        for win in windows:
            _sleep_until(t0 + win.start)
            a = inj.apply(win)
            n = h.fault_start(win.label, a.nodes)
            log(f"  {time.monotonic() - t0:6.1f}s {win.label} on {','.join(a.nodes)} "
                f"{a.evidence}")
            _sleep_until(t0 + win.end)
            after = a.undo()
            h.fault_end(n)
            out.append({"window": win.to_json(), "nodes": a.nodes, **a.evidence, **after})
        _sleep_until(t0 + o.duration)
        healthy = _wait_healthy(system, o.out / "cluster", 60, fail=False)
        w.stop()
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(task, 60), loop).result(90)
        drained = asyncio.run_coroutine_threadsafe(w.drain(180), loop).result(240)
        log(f"  healthy before the drain: {healthy}; drained: {drained}; sent {w.sent}")
        return out
    finally:  # (a run ended early, by SIGTERM or an error, leaves no C++ producer behind)
        with contextlib.suppress(Exception):  # (cleanup: the run's own error is the one told)
            asyncio.run_coroutine_threadsafe(w.kill_children(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _sleep_until(t: float) -> None:
    """The schedule's clock: wait until monotonic time `t` (nothing to synchronize with)."""
    threading.Event().wait(max(0.0, t - time.monotonic()))


def _wait_healthy(system: System, d: Path, timeout: float, fail: bool = True) -> bool:
    end, line = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        try:
            ok, line = system.health(d)
        except Exception as e:  # noqa: BLE001 - not up yet
            ok, line = False, str(e)
        if ok:
            return True
        threading.Event().wait(0.5)
    if fail:
        raise RuntimeError(f"the cluster did not become healthy within {timeout:.0f} s: {line}")
    return False


def _excused(h, evidence: list[dict], group_of: dict, outside: dict) -> set[str]:
    """The lost messages a fault the promise does not cover can account for: acknowledged
    by a group before such a fault hit one of its brokers."""
    hits = [(ev["window"]["fault"], group_of.get(n), f.start)  # the history's clock
            for f, ev in zip(h.faults, evidence) for n in ev["nodes"]]
    read_in = {r.id: r.broker for r in h.reads if r.broker}  # the C++ producer's sends
    out = set()                                                # do not say where they went
    for m in lost_ids(h):
        a = h.attempts[m]
        group = a.broker or read_in.get(m)
        if any(fam in outside and g == group and a.completed < start
               for fam, g, start in hits):
            out.add(m)
    return out


def _results(o: Options, faults, windows, evidence, hist_path: Path, replicas: int,
             system: str) -> dict:
    h = load(hist_path)
    c = check(h)
    group_of = {p["name"]: p.get("group") for p in json.loads(
        (o.out / "cluster" / "cluster.json").read_text())["processes"]}
    promised, promise, outside = PROMISES[o.mode]
    excused = _excused(h, evidence, group_of, outside)
    broken = []
    if not c["drained"]:
        broken.append("the drain did not finish: lost cannot be told")
        broken += [f"drain: {g}" for g in c["drain_gaps"]["unreached"]]
    if c["unexpected"]["count"]:
        broken.append(f"{c['unexpected']['count']} unexpected (read, never sent)")
    if promised and c["lost"]["count"] > len(excused):
        broken.append(f"{c['lost']['count'] - len(excused)} lost (acknowledged, not in the log "
                      "at the end)")
    per_window: list[dict] = []
    for cw, ev in zip(c["windows"], evidence):
        hit = {group_of[n] for n in ev["nodes"] if group_of.get(n)}
        if not hit:  # a name server, controller or control node alone: every group
            hit |= {g for g in group_of.values() if g}
        per_window.append({**cw, "groups_hit": sorted(hit),
                           **window_recovery(h, cw["start"], cw["end"], hit),
                           "applied": {k: v for k, v in ev.items() if k != "nodes"}})
    res = {
        "system": system, "mode": o.mode, "seed": o.seed, "faults": faults, "duration": o.duration,
        "interval": o.interval, "groups": o.groups, "namesrvs": o.namesrvs,
        "replicas": replicas, "rate": o.rate,
        "promise": {"no_loss": promised, "what": promise, "not_against": outside},
        "promise_kept": not broken, "broken": broken,
        "lost": c["lost"]["count"], "lost_outside_promise": len(excused),
        "unexpected": c["unexpected"]["count"],
        "duplicates": c["duplicates"]["count"],
        "indeterminate": c["indeterminate"]["count"],
        "failed_but_read": c["failed_but_read"]["count"],
        "drain_short": c["drain_gaps"]["short"],
        "max_recovery_s": max((w["group_recovery_s"] or 0 for w in per_window), default=None),
        "windows": per_window,
        "check": {k: v for k, v in c.items() if k != "windows"},
    }
    (o.out / "results.json").write_text(json.dumps(res, indent=1))
    try:
        from .timeline import render
        render(h, o.out / "timeline.png")
    except ImportError as e:  # matplotlib is the `chaos` extra
        res["timeline"] = f"not drawn: {e}"
        (o.out / "results.json").write_text(json.dumps(res, indent=1))
    return res
