"""The simulator: the protocol survives 200 seeds of faults, and every known bug is caught."""
import pytest

from ledgermq.replication.raft import BUGS
from ledgermq.sim import PROFILES, RaftSim

SEEDS = 200
BUG_SEED_BOUND = 300


def test_raft_survives_random_faults():
    failures = []
    for seed in range(SEEDS):
        r = RaftSim(seed, steps=3000).run()
        if not r.ok:
            failures.append((seed, r.violation, "\n".join(r.trace[-20:])))
    assert not failures, failures[0]


def test_raft_survives_worst_moment_faults():
    for seed in range(100):
        r = RaftSim(seed, steps=3000, profile=PROFILES["nemesis"]).run()
        assert r.ok, (seed, r.violation, "\n".join(r.trace[-20:]))


def test_runs_replay_exactly():
    a, b = RaftSim(42, steps=2000).run(), RaftSim(42, steps=2000).run()
    assert (a.steps, a.virtual_ms, a.stats) == (b.steps, b.virtual_ms, b.stats)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(BUG_SEED_BOUND):
        r = RaftSim(seed, steps=3000, bugs=frozenset([bug]), profile=PROFILES["nemesis"]).run()
        if not r.ok:
            assert r.violation and r.trace
            return
    pytest.fail(f"{bug} went unnoticed for {BUG_SEED_BOUND} seeds")
