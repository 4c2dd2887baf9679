"""The long simulator run (`make sim-long`): `ledgermq sim` for every protocol over many
seeds (10,000 by default, split over --jobs processes), and every injected bug of every
simulator caught, by the invariant it breaks, within the seed bound the default test run
gives it.

It runs the real command (`python -m ledgermq sim ... --json`), one run at a time, with
the steps and profiles of the default tests (tests/sim), so a failure here replays with
the command it prints. Exit status 1 on any failure; a summary table either way.

    python -m tests.sim.long                    # everything, 10,000 seeds each
    python -m tests.sim.long --seeds 200 --only checkpoint --only raft-nemesis
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from . import (
    test_autoswitch_sim, test_checkpoint_sim, test_classic_ha_sim, test_raft_sim,
)


@dataclass(frozen=True)
class Protocol:
    """One `ledgermq sim --protocol` run and the test module that owns its bugs."""
    label: str
    protocol: str
    steps: int
    profile: str = "random"
    bug_breaks: dict = field(default_factory=dict)  # bug -> the invariant it breaks
    bug_bound: int = 0  # seeds within which each bug must be caught
    bug_profile: str = "random"


# steps, profiles and bounds as the default tests use them (the seeds are what grows)
PROTOCOLS = [
    Protocol("raft-random", "raft", 3000),
    Protocol("raft-nemesis", "raft", 3000, "nemesis", test_raft_sim.BUG_BREAKS,
             test_raft_sim.BUG_SEED_BOUND, "nemesis"),
    Protocol("sync", "sync", test_classic_ha_sim.STEPS, bug_breaks={
        b: inv for b, inv in test_classic_ha_sim.BUG_BREAKS.items()
        if test_classic_ha_sim.BUG_MODE[b] == "sync"},
        bug_bound=test_classic_ha_sim.BUG_SEED_BOUND),
    Protocol("async", "async", test_classic_ha_sim.STEPS, bug_breaks={
        b: inv for b, inv in test_classic_ha_sim.BUG_BREAKS.items()
        if test_classic_ha_sim.BUG_MODE[b] == "async"},
        bug_bound=test_classic_ha_sim.BUG_SEED_BOUND),
    Protocol("checkpoint", "checkpoint", test_checkpoint_sim.STEPS,
             bug_breaks=test_checkpoint_sim.BUG_BREAKS,
             bug_bound=test_checkpoint_sim.BUG_SEED_BOUND),
    Protocol("controller", "controller", 8000, bug_breaks=test_autoswitch_sim.BUG_BREAKS,
             bug_bound=test_autoswitch_sim.BUG_SEED_BOUND),
]


@dataclass
class Row:
    run: str
    seeds: int
    seconds: float
    ok: bool
    note: str = ""
    failures: list = field(default_factory=list)  # (seed, invariant, violation, replay)


def sim(protocol: str, steps: int, profile: str, seeds: int, *extra: str) -> dict:
    """One `ledgermq sim` run; its JSON summary."""
    cmd = [sys.executable, "-m", "ledgermq", "sim", "--protocol", protocol, "--steps",
           str(steps), "--profile", profile, "--seeds", str(seeds), "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def run_protocol(p: Protocol, seeds: int, jobs: int) -> Row:
    """Seeds 0..seeds-1 in `jobs` consecutive ranges, one process each (the seconds are
    the wall-clock time of the whole)."""
    t0 = time.perf_counter()
    starts = [seeds * i // jobs for i in range(jobs + 1)]
    ranges = [(a, b - a) for a, b in zip(starts, starts[1:]) if b > a]
    with ThreadPoolExecutor(len(ranges)) as pool:
        parts = list(pool.map(lambda r: sim(p.protocol, p.steps, p.profile, r[1], "--seed",
                                            str(r[0]), "--keep-going"), ranges))
    fails = [(f["seed"], f["invariant"], f["violation"], f["replay"])
             for s in parts for f in s["failed"]]
    run = sum(s["seeds_run"] for s in parts)
    ok = not fails and run == seeds
    return Row(p.label, run, time.perf_counter() - t0, ok,
               "" if ok else f"{len(fails)} seed(s) failed", fails)


def run_bug(p: Protocol, bug: str, invariant: str) -> Row:
    """The bug must break `invariant` on the first seed that fails, within the bound."""
    s = sim(p.protocol, p.steps, p.bug_profile, p.bug_bound, "--inject-bug", bug,
            "--stop-on-failure")
    label = f"{p.protocol} +{bug}"
    if not s["failed"]:
        return Row(label, s["seeds_run"], s["seconds"], False,
                   f"not caught within {p.bug_bound} seeds")
    f = s["failed"][0]
    ok = f["invariant"] == invariant
    note = f"caught by {f['invariant']} at seed {f['seed']}" + \
        ("" if ok else f" (expected {invariant})")
    return Row(label, s["seeds_run"], s["seconds"], ok, note,
               [] if ok else [(f["seed"], f["invariant"], f["violation"], f["replay"])])


def known_bugs(protocol: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "ledgermq", "sim", "--protocol", protocol,
                          "--list-bugs", "--json"], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def unmapped_bugs() -> list[str]:
    """Bugs a simulator knows that no run here would inject (each needs its invariant)."""
    mapped: dict[str, set[str]] = {}
    for p in PROTOCOLS:
        mapped.setdefault(p.protocol, set()).update(p.bug_breaks)
    # classic HA's bugs are one list for both modes: each runs in the mode it breaks
    classic = mapped.pop("sync") | mapped.pop("async")
    missing = sorted(known_bugs("sync") - classic)
    missing += sorted(f"{proto}:{b}" for proto, bugs in mapped.items()
                      for b in known_bugs(proto) - bugs)
    return missing


def table(rows: list[Row]) -> str:
    width = max([34] + [len(r.run) for r in rows])
    lines = [f"{'run':{width}}  {'seeds':>6}  {'seconds':>8}  result"]
    for r in rows:
        lines.append(f"{r.run:{width}}  {r.seeds:>6}  {r.seconds:>8.1f}  "
                     f"{'ok' if r.ok else 'FAIL'}{'  ' + r.note if r.note else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10000, help="seeds per protocol run")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="processes per protocol run (each a range of the seeds)")
    ap.add_argument("--only", action="append", choices=[p.label for p in PROTOCOLS],
                    help="run only these (repeatable); default: all")
    ap.add_argument("--no-bugs", action="store_true", help="skip the injected bugs")
    args = ap.parse_args(argv)
    chosen = [p for p in PROTOCOLS if not args.only or p.label in args.only]
    rows: list[Row] = []
    t0 = time.perf_counter()
    for p in chosen:
        rows.append(run_protocol(p, args.seeds, max(1, args.jobs)))
        print(table(rows[-1:]).splitlines()[1], flush=True)
        if not args.no_bugs:
            for bug, invariant in sorted(p.bug_breaks.items()):
                rows.append(run_bug(p, bug, invariant))
                print(table(rows[-1:]).splitlines()[1], flush=True)
    missing = [] if args.only or args.no_bugs else unmapped_bugs()
    print(f"\n{table(rows)}\n")
    for r in rows:
        for seed, invariant, violation, replay in r.failures:
            print(f"{r.run}: seed {seed} [{invariant}] {violation}\n  replay: {replay}")
    for m in missing:
        print(f"bug {m} has no invariant to be caught by (add it to its tests/sim module)")
    failed = sum(not r.ok for r in rows) + len(missing)
    print(f"{len(rows)} runs, {failed} failed, {time.perf_counter() - t0:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
