"""Every simulator replays a seed exactly: two runs of one seed agree on the whole trace,
every event included (trace_events logs each one as it runs), not just on a summary."""
import pytest

from ledgermq.sim import CheckpointSim, ClassicHASim, RaftSim
from ledgermq.sim.autoswitch import AutoSwitchSim
from ledgermq.sim.controller import ControllerSim

SIMULATORS = {
    "raft": lambda **kw: RaftSim(42, steps=2000, **kw),
    "sync": lambda **kw: ClassicHASim(7, mode="sync", steps=5000, **kw),
    "async": lambda **kw: ClassicHASim(7, mode="async", steps=5000, **kw),
    "checkpoint": lambda **kw: CheckpointSim(7, steps=5000, **kw),
    "controller": lambda **kw: ControllerSim(3, steps=4000, **kw),
    "autoswitch": lambda **kw: AutoSwitchSim(7, steps=5000, **kw),
}


@pytest.mark.parametrize("name", sorted(SIMULATORS))
def test_runs_replay_exactly(name):
    a = SIMULATORS[name](trace_events=True).run()
    b = SIMULATORS[name](trace_events=True).run()
    assert len(a.trace) > a.steps  # every event is in it, and the log lines too
    for i, (x, y) in enumerate(zip(a.trace, b.trace)):
        assert x == y, f"trace line {i} differs"
    assert (len(a.trace), a.digest, a.steps, a.virtual_ms, a.stats) == \
        (len(b.trace), b.digest, b.steps, b.virtual_ms, b.stats)
    quiet = SIMULATORS[name]().run()  # tracing events does not change the run
    assert (quiet.steps, quiet.virtual_ms, quiet.stats) == (a.steps, a.virtual_ms, a.stats)
    assert set(quiet.trace) <= set(a.trace)
