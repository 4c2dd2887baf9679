"""The deterministic simulator: ledgermq sim."""
from __future__ import annotations

import sys
import time

import click

from . import _emit, _progress, main

TRACE_SHOWN = 80  # trace lines a failure shows (its digest covers them all)


@main.command()
@click.option("--protocol", type=click.Choice(["raft", "sync", "async", "checkpoint",
                                             "controller"]),
              default="raft", show_default=True, help="raft: DLedger mode (S0); sync / async: "
              "classic HA with a SYNC_ / ASYNC_MASTER (S2); checkpoint: consistent checkpoint "
              "and control node (S3); controller: the controller group of controller mode "
              "(S1).")
@click.option("--seeds", default=100, show_default=True, help="How many seeds to run.")
@click.option("--seed", "first_seed", default=0, show_default=True, help="The first seed.")
@click.option("--steps", default=4000, show_default=True, help="Simulated events per seed.")
@click.option("--inject-bug", "bugs", multiple=True, help="Switch on a known protocol bug "
              "(test-only), to see the checker catch it.")
@click.option("--list-bugs", is_flag=True, help="List the bugs --inject-bug knows.")
@click.option("--profile", type=click.Choice(["random", "nemesis"]), default="random",
              show_default=True, help="Fault profile (raft): drawn per seed, or worst-moment "
              "faults.")
@click.option("--stop-on-failure/--keep-going", default=True, show_default=True)
@click.option("--trace-events", is_flag=True, help="Trace every simulated event, not only "
              "the notable ones (to compare two replays of a seed line by line).")
@click.option("--json", "as_json", is_flag=True)
def sim(protocol, seeds, first_seed, steps, bugs, list_bugs, profile, stop_on_failure,
        trace_events, as_json):
    """Run the replication protocol in the deterministic simulator under random faults."""
    from ..sim import PROFILES, CheckpointSim, ClassicHASim, RaftSim
    from ..sim.autoswitch import AutoSwitchSim

    simulator, options = {
        "raft": (RaftSim, {"profile": PROFILES[profile]}),
        "sync": (ClassicHASim, {"mode": "sync"}),
        "async": (ClassicHASim, {"mode": "async"}),
        "checkpoint": (CheckpointSim, {}),
        "controller": (AutoSwitchSim, {}),
    }[protocol]
    BUGS = simulator.BUGS

    if list_bugs:
        _emit(BUGS, as_json, lambda b: click.echo("\n".join(f"{k:22} {v}" for k, v in b.items())))
        return
    unknown = [b for b in bugs if b not in BUGS]
    if unknown:
        raise click.BadParameter(f"unknown bug(s) {', '.join(unknown)}; see --list-bugs")
    failures, runs, t0 = [], 0, time.perf_counter()
    with _progress(f"{protocol} seeds") as bar:
        task = bar.add_task("sim", total=seeds)
        for seed in range(first_seed, first_seed + seeds):
            r = simulator(seed, steps=steps, bugs=frozenset(bugs), trace_events=trace_events,
                          **options).run()
            runs += 1
            bar.advance(task)
            if not r.ok:
                failures.append(r)
                if stop_on_failure:
                    break
    replay = lambda r: (f"ledgermq sim --protocol {protocol} --seed {r.seed} --seeds 1 "
                        f"--steps {steps} --profile {profile}"
                        + "".join(f" --inject-bug {b}" for b in bugs)
                        + (" --trace-events" if trace_events else ""))
    summary = {"protocol": protocol, "seeds_run": runs, "failures": len(failures),
               "seconds": round(time.perf_counter() - t0, 2), "bugs": list(bugs),
               "failed": [{"seed": r.seed, "invariant": r.invariant, "violation": r.violation,
                           "replay": replay(r), "steps": r.steps, "virtual_ms": r.virtual_ms,
                           "trace": r.tail(TRACE_SHOWN), "trace_lines": len(r.trace),
                           "trace_digest": r.digest}
                          for r in failures]}

    def render(s):
        for f in s["failed"]:
            click.echo(f"seed {f['seed']} FAILED [{f['invariant']}]: {f['violation']}")
            click.echo(f"replay: {f['replay']}")
            click.echo(f"trace (last {len(f['trace'])} of {f['trace_lines']} lines, digest "
                       f"{f['trace_digest']}):")
            click.echo("\n".join("  " + line for line in f["trace"]))
        click.echo(f"{s['seeds_run']} seeds, {s['failures']} failed, {s['seconds']}s")
    _emit(summary, as_json, render)
    if failures:
        sys.exit(1)
