"""The simulator: the protocol survives 200 seeds of faults, and every known bug is caught
by the invariant it breaks."""
import pytest

from ledgermq.replication.raft import BUGS
from ledgermq.sim import PROFILES, RaftSim

SEEDS = 200
BUG_SEED_BOUND = 300
BUG_BREAKS = {
    "commit-old-term": "state-machine-safety",
    "commit-past-end": "commit-within-log",
    "truncate-to-commit": "log-matching",
    "vote-by-current-term": "leader-completeness",
}


def test_raft_survives_random_faults():
    failures = []
    for seed in range(SEEDS):
        r = RaftSim(seed, steps=3000).run()
        if not r.ok:
            failures.append((seed, r.invariant, r.violation, "\n".join(r.tail(20))))
    assert not failures, failures[0]


def test_raft_survives_worst_moment_faults():
    for seed in range(100):
        r = RaftSim(seed, steps=3000, profile=PROFILES["nemesis"]).run()
        assert r.ok, (seed, r.invariant, r.violation, "\n".join(r.tail(20)))


def test_every_bug_names_its_invariant():
    assert set(BUG_BREAKS) == set(BUGS)
    assert set(BUG_BREAKS.values()) <= set(RaftSim.INVARIANTS)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(BUG_SEED_BOUND):
        r = RaftSim(seed, steps=3000, bugs=[bug], profile=PROFILES["nemesis"]).run()
        if not r.ok:
            assert r.invariant == BUG_BREAKS[bug], (seed, r.invariant, r.violation)
            again = RaftSim(seed, steps=3000, bugs=[bug], profile=PROFILES["nemesis"]).run()
            assert again.trace == r.trace  # the failing seed replays exactly
            return
    pytest.fail(f"{bug} went unnoticed for {BUG_SEED_BOUND} seeds")
