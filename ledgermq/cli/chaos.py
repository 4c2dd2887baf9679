"""`ledgermq chaos`: a seeded fault run against one mode on test hosts (root only)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from . import main

MODES = ["dledger", "sync", "async", "checkpoint", "controller"]


@main.command()
@click.option("--mode", type=click.Choice(MODES), required=True)
@click.option("--groups", default=2, show_default=True, help="Replica groups.")
@click.option("--namesrvs", default=2, show_default=True, help="Name servers.")
@click.option("--replicas", default=None, type=int,
              help="Brokers per group (default: 3 for dledger, 2 for the others).")
@click.option("--faults", default=None,
              help="Fault families, comma-separated: kill, pause, partition[:isolate|split|"
              "bridge|ring|clients], slow, lost-writes (kill -9, then the unsynced tail cut), "
              "corrupt (kill -9, flushed bytes zeroed or flipped), disk-full (the broker's "
              "small disk filled), combined (controller leader or control node + master). "
              "Default: all of them (combined where it applies).")
@click.option("--duration", default=120.0, show_default=True, help="Seconds of workload.")
@click.option("--interval", default=20.0, show_default=True,
              help="Longest fault window, s (each lasts half of it to all of it).")
@click.option("--rate", default=50.0, show_default=True, help="Sends per second.")
@click.option("--seed", default=1, show_default=True)
@click.option("--cpp-client", "cpp_python", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="A Python that has RocketMQ's C++ client (PyPI rocketmq==0.4.4): a quarter "
              "of the sends go through it.")
@click.option("--control-nodes", default=3, show_default=True,
              help="checkpoint mode: the control node group's size (1: a single control "
              "node, which nothing stands in for while it is down).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path))
def chaos(mode, groups, namesrvs, replicas, faults, duration, interval, rate, seed, cpp_python,
          control_nodes, out):
    """Run the workload against MODE on test hosts while the seeded faults hit it; writes
    history.jsonl, results.json and timeline.png to OUT. Exits 1 when the mode's promise is
    broken (lost or unexpected messages), 3 when this machine cannot run test hosts."""
    from ..chaos.faults import NotSupported
    from ..chaos.runner import Options, Unavailable, default_faults, run
    if groups < 1 or namesrvs < 1 or control_nodes < 1 or (replicas is not None and
                                                              replicas < 1):
        raise click.BadParameter("--groups, --namesrvs, --control-nodes and --replicas must "
                                 "be at least 1")
    if duration <= 0 or interval <= 0 or rate <= 0:
        raise click.BadParameter("--duration, --interval and --rate must be positive")
    o = Options(mode, faults or default_faults(mode), duration, seed, out, groups=groups,
                namesrvs=namesrvs, replicas=replicas, interval=interval, rate=rate,
                cpp_python=cpp_python, control_nodes=control_nodes)
    try:
        res = run(o, log=lambda line: click.echo(line, err=True))
    except Unavailable as e:
        click.echo(f"chaos: skipped: {e}", err=True)
        sys.exit(3)
    except (NotSupported, ValueError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{mode}: lost {res['lost']}, unexpected {res['unexpected']}, duplicates "
               f"{res['duplicates']}, indeterminate {res['indeterminate']}, max recovery "
               f"{res['max_recovery_s']} s; promise ({'no loss' if res['promise']['no_loss'] else 'none on failover'}) "
               f"{'kept' if res['promise_kept'] else 'BROKEN: ' + '; '.join(res['broken'])}")
    click.echo(f"results: {out / 'results.json'}, {out / 'timeline.png'}")
    if not res["promise_kept"]:
        sys.exit(1)
