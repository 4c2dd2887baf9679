"""Classic HA (S2) and checkpoint + control node (S3) in the simulator: the designs survive
random faults, runs replay exactly, and every known bug is caught."""
import pytest

from ledgermq.sim import HASim
from ledgermq.sim.ha import BUGS, MODES

SEEDS = 100
STEPS = 10_000
BUG_SEED_BOUND = 100
BUG_MODE = {"ack-on-master-write": "sync", "checkpoint-max": "checkpoint",
            "failover-skips-cache": "checkpoint", "no-rollback": "checkpoint"}


@pytest.mark.parametrize("mode", MODES)
def test_design_survives_random_faults(mode):
    promotions = 0
    for seed in range(SEEDS):
        r = HASim(seed, mode=mode, steps=STEPS).run()
        assert r.ok, (seed, r.violation, "\n".join(r.trace[-30:]))
        promotions += r.stats["promotions"]
        assert r.stats["sent"].get("OK", 0) > 0
    if mode == "checkpoint":
        assert promotions >= SEEDS  # failovers really happened, many times


def test_checkpoint_mode_slaves_that_join_empty_after_the_first_segment():
    """Seeds where a slave first connects, empty, after the master wrote more than a
    segment: it must copy the master's whole log (it once started at the last segment)."""
    for seed in (179, 185):
        r = HASim(seed, mode="checkpoint", steps=4000).run()
        assert r.ok, (seed, r.violation, "\n".join(r.trace[-30:]))


def test_checkpoint_mode_exercises_pending_and_both_resolutions():
    seen: dict[str, int] = {}
    for seed in range(30):
        for k, v in HASim(seed, mode="checkpoint", steps=STEPS).run().stats["sent"].items():
            seen[k] = seen.get(k, 0) + v
    assert seen.get("DONE", 0) > 0 and seen.get("RESEND", 0) > 0, seen


def test_runs_replay_exactly():
    a = HASim(7, mode="checkpoint", steps=5000).run()
    b = HASim(7, mode="checkpoint", steps=5000).run()
    assert (a.steps, a.virtual_ms, a.stats) == (b.steps, b.virtual_ms, b.stats)


def test_every_bug_has_a_mode():
    assert set(BUG_MODE) == set(BUGS)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(BUG_SEED_BOUND):
        r = HASim(seed, mode=BUG_MODE[bug], steps=STEPS, bugs=frozenset([bug])).run()
        if not r.ok:
            assert r.violation and r.trace
            return
    pytest.fail(f"{bug} went unnoticed for {BUG_SEED_BOUND} seeds")
