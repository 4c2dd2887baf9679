"""`ledgermq chaos` end to end on test hosts: a short run per mode, each fault family in one
of them. Asserts the mode's promise (0 lost where promised, 0 unexpected) and that every
window really took: the killed process died and came back under a new pid, the paused one
was stopped, a connection across the cut did not get through (and did after the heal), the
slowed link answered late; and the group it hit took writes again. Needs root; skips
saying why otherwise. Long runs: `make chaos`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ledgermq.chaos import available
from ledgermq.chaos.history import load
from ledgermq.chaos.runner import Options, run
from ledgermq.localcluster.cluster import pid_alive

from ..compat.venv import cpp_client_python
from ..wait import wait_until

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


AFTER_HEAL_BOUND_S = 15.0


def _applied(w: dict) -> None:
    """The window's evidence shows its fault took effect and was undone."""
    fault, ev = w["applied"]["window"]["fault"], w["applied"]
    if fault in ("kill", "combined"):
        assert ev["dead"] == list(ev["killed"]) == w["nodes"], ev
        assert set(ev["restarted"]) == set(ev["killed"]), ev
        assert all(ev["restarted"][n] != ev["killed"][n] for n in ev["killed"]), ev
        if fault == "combined":
            assert len(w["nodes"]) == 2 and ev["master"] in w["nodes"], ev
    elif fault == "pause":
        assert set(ev["state"].values()) == {"T"}, ev  # stopped
        assert "T" not in ev["state_after"].values(), ev
    elif fault == "partition":
        assert ev["probe"]["reached"] is False and ev["probe_after"] is True, ev
    elif fault in ("lost-writes", "corrupt"):  # killed, its files hurt, restarted
        assert ev["dead"] == list(ev["killed"]) == w["nodes"] == list(ev["restarted"]), ev
        if fault == "lost-writes" and ev["cut"]:  # a cut at or past the last fsync
            assert ev["cut"]["flushed"] <= ev["cut"]["offset"] <= ev["cut"]["written_end"], ev
        if fault == "corrupt":
            hurt = ev["damage"]
            assert hurt and 0 < hurt["length"] and \
                hurt["offset"] + hurt["length"] <= hurt["flushed"], ev
    elif fault == "disk-full":
        assert ev["free_bytes"] < 1 << 20 < ev["free_bytes_after"], ev
    elif fault == "slow":
        p = ev["window"]["params"]
        took = [ms for ms in ev["connect_ms"] if ms is not None]  # a few connects
        assert took and max(took) >= p["delay_ms"] - p["jitter_ms"] - 5, ev
        assert ev["connect_ms_after"] < p["delay_ms"] - p["jitter_ms"], ev
    else:
        raise AssertionError(f"unexpected fault {fault}")
    assert w["group_recovery_s"] is not None, w  # the hit groups took writes again
    # and soon after the fault was undone (a loose bound, for a loaded machine: it catches
    # a group that stays down after its fault, as a refill without end did)
    assert w["group_recovery_after_heal_s"] is not None, w
    assert w["group_recovery_after_heal_s"] <= AFTER_HEAL_BOUND_S, w
    # and the consumers read again: something sent to those groups after the heal
    assert w["read_outage_s"] is not None, w


def _short(tmp_path, mode: str, faults: str, seed: int, duration: float = 28,
           cpp: bool = False, interval: float = 6, quiet: float = 4) -> dict:
    # 4 s warm-up, windows of at most `interval`, gaps of at most `quiet`, a final quiet:
    # with 6 and 4, two windows fit in 28 s, three in 40; with 4 and 3, two in 19
    res = run(Options(mode, faults, duration=duration, seed=seed, out=tmp_path,
                      interval=interval, quiet=quiet, final_quiet=quiet, rate=40,
                      cpp_python=str(cpp_client_python()) if cpp else None),
              log=lambda line: None)
    assert (tmp_path / "history.jsonl").stat().st_size and (tmp_path / "timeline.png").exists()
    assert json.loads((tmp_path / "results.json").read_text())["lost"] == res["lost"]
    assert res["check"]["drained"], res["broken"]
    assert res["unexpected"] == 0
    if res["promise"]["no_loss"]:
        assert res["lost"] == 0, res["check"]["lost"]
    assert res["promise_kept"] == (res["broken"] == []), res
    families = {w["applied"]["window"]["fault"] for w in res["windows"]}
    assert families == set(faults.split(",")), res["windows"]
    for w in res["windows"]:
        _applied(w)
    if cpp:  # RocketMQ's C++ client sent a share, acknowledged and read like the rest
        h = load(tmp_path / "history.jsonl")
        ok = {k for k, a in h.attempts.items() if k.startswith("cpp-") and a.outcome == "ok"}
        assert len(ok) > 100 and ok <= {r.id for r in h.reads}, len(ok)
    return res


SHORT = {"duration": 19, "interval": 4, "quiet": 3}  # the default run's: two 2-4 s windows
# windows of 4-8 s: longer than a failover takes, so one made while the dead stayed dead
# shows apart from one made only after they came back
LONGER = {"duration": 24, "interval": 8, "quiet": 3}
COMBINED_BOUND_S = 5.0  # #34's target: a master killed with the controller leader or the
                        # control node group's leader, to the group's next acknowledgement


@pytest.mark.parametrize("mode, faults, seed, cpp, windows", [
    # every mode, two short windows each: its promise and a recovery bound (the 10-minute
    # `make chaos` runs every fault family)
    ("dledger", "kill,partition", 3, True, SHORT),
    ("controller", "combined,pause", 1, False, LONGER),
    ("sync", "slow,kill", 2, False, SHORT),
    ("checkpoint", "combined,partition", 4, False, LONGER),  # a control node group of three
    ("async", "pause,partition", 5, False, SHORT),
])
def test_a_short_run_keeps_the_promise_and_applies_every_fault(tmp_path, mode, faults, seed,
                                                               cpp, windows):
    res = _short(tmp_path, mode, faults, seed, cpp=cpp, **windows)
    for w in res["windows"]:
        if w["applied"]["window"]["fault"] == "combined":
            assert w["group_recovery_s"] <= COMBINED_BOUND_S, w


# 40 s of faults: in the slow run; the default run has tests/chaos/test_disk.py and
# tests/integration/test_dledger_corruption.py
@pytest.mark.slow
def test_store_faults_a_minority_node_loses_nothing(tmp_path):
    """DLedger: a node's unsynced tail cut after kill -9, its flushed bytes zeroed or flipped,
    its disk filled while it runs; the group loses no acknowledged message."""
    _short(tmp_path, "dledger", "lost-writes,corrupt,disk-full", 1, duration=40)


def _children(pid: int) -> dict[int, str]:
    """pid -> command line of `pid`'s child processes (from /proc)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            if ppid == pid:
                out[int(stat.parent.name)] = \
                    (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def test_a_terminated_run_leaves_no_cpp_producer_behind(tmp_path):
    """SIGTERM unwinds a run (its nets closed, its brokers stopped); the C++ producer, a
    process of the workload's own, used to stay behind until its sends in flight gave up
    (to a hung broker: seconds, sending to nothing)."""
    out = tmp_path / "run"
    runner = subprocess.Popen(
        [sys.executable, "-m", "ledgermq", "chaos", "--mode", "dledger", "--groups", "1",
         "--namesrvs", "1", "--replicas", "1", "--faults", "pause", "--duration", "120",
         "--cpp-client", str(cpp_client_python()), "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        hist = out / "history.jsonl"
        wait_until(lambda: hist.exists() and '"cpp-' in hist.read_text(),
                   "the C++ producer's first send", 90)
        cpp = [p for p, cmd in _children(runner.pid).items() if "cpp_producer.py" in cmd]
        assert len(cpp) == 1, _children(runner.pid)
        broker = next(p for p in json.loads((out / "cluster" / "cluster.json").read_text())
                      ["processes"] if p["kind"] == "broker")
        os.kill(broker["pid"], signal.SIGSTOP)  # the producer's sends now hang
        runner.terminate()
        runner.wait(60)
        wait_until(lambda: not pid_alive(cpp[0]), "the C++ producer gone", 2)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
