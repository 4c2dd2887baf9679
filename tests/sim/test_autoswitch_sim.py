"""Controller mode end to end in the simulator (controllers and brokers together): under
broker, controller and link faults, with crashes in the middle of a truncation, no
acknowledged send is missing from a new master, slaves' logs are prefixes of their
master's, epoch files agree, and sends are acknowledged again once faults heal; each
known bug is caught."""
import pytest

from ledgermq.sim.autoswitch import BUGS, AutoSwitchSim


def test_controller_mode_survives_random_faults():
    totals: dict = {}
    for seed in range(150):
        r = AutoSwitchSim(seed, steps=8000).run()
        assert r.ok, (seed, r.violation, "\n".join(r.trace[-30:]))
        for k, v in r.stats.items():
            totals[k] = totals.get(k, 0) + v
    # the faults really moved masters, truncated logs and still acknowledged most sends
    assert totals["masters"] > 300 and totals["truncations"] > 50, totals
    assert totals["acked"] > 0.8 * totals["sends"], totals


def test_runs_replay_exactly():
    a, b = AutoSwitchSim(7, steps=5000).run(), AutoSwitchSim(7, steps=5000).run()
    assert (a.steps, a.virtual_ms, a.stats) == (b.steps, b.virtual_ms, b.stats)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(100):
        r = AutoSwitchSim(seed, steps=8000, bugs=frozenset([bug])).run()
        if not r.ok:
            assert r.violation and r.trace
            return
    pytest.fail(f"{bug} went unnoticed for 100 seeds")
