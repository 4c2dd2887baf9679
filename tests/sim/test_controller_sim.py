"""The controller group of controller mode (S1) in the simulator: three ControllerNodes
under crashes, partitions and brokers coming and going agree on every command, keep one
master per epoch from the SyncStateSet, and fail a dead master over; the known bug is
caught."""
import pytest

from ledgermq.controller import BUGS
from ledgermq.sim.controller import ControllerSim


def test_controller_group_survives_random_faults():
    elections = 0
    for seed in range(100):
        r = ControllerSim(seed, steps=6000).run()
        assert r.ok, (seed, r.violation, "\n".join(r.trace[-30:]))
        elections += r.stats["elections"]
    assert elections > 300  # masters really changed hands, many times


def test_runs_replay_exactly():
    a, b = ControllerSim(3, steps=4000).run(), ControllerSim(3, steps=4000).run()
    assert (a.steps, a.virtual_ms, a.stats) == (b.steps, b.virtual_ms, b.stats)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(100):
        r = ControllerSim(seed, steps=6000, bugs=frozenset([bug])).run()
        if not r.ok:
            assert r.violation and r.trace
            return
    pytest.fail(f"{bug} went unnoticed for 100 seeds")
