"""The controller group of controller mode (S1) in the simulator: three ControllerNodes
under crashes, partitions and brokers coming and going agree on every command, keep one
master per epoch from the SyncStateSet, and fail a dead master over; the known bug is
caught by the invariant it breaks."""
import pytest

from ledgermq.controller import BUGS
from ledgermq.sim.controller import ControllerSim

BUG_SEED_BOUND = 100
BUG_BREAKS = {"elect-outside-sync-set": "elect-from-sync-set"}


def test_controller_group_survives_random_faults():
    elections = 0
    for seed in range(60):  # (make sim-long: 2,000)
        r = ControllerSim(seed, steps=6000).run()
        assert r.ok, (seed, r.invariant, r.violation, "\n".join(r.tail(30)))
        elections += r.stats["elections"]
    assert elections > 180  # masters really changed hands, many times


def test_every_bug_names_its_invariant():
    assert set(BUG_BREAKS) == set(BUGS)
    assert set(BUG_BREAKS.values()) <= set(ControllerSim.INVARIANTS)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(BUG_SEED_BOUND):
        r = ControllerSim(seed, steps=6000, bugs=[bug]).run()
        if not r.ok:
            assert r.invariant == BUG_BREAKS[bug], (seed, r.invariant, r.violation)
            again = ControllerSim(seed, steps=6000, bugs=[bug]).run()
            assert again.trace == r.trace  # the failing seed replays exactly
            return
    pytest.fail(f"{bug} went unnoticed for {BUG_SEED_BOUND} seeds")
