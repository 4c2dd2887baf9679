"""The link shaper's schedule (netem's delay, jitter, loss and reorder) as a pure function
of a seeded random source; the test-host tests show it on a real link."""
import random

import pytest

from ledgermq.chaos import Shape


def schedule(shape, n=10_000, seed=1):
    rng = random.Random(seed)
    return [shape.release_at(float(i), rng) for i in range(n)]  # frame i arrives at i s


def test_loss_drops_about_its_share_of_frames():
    got = schedule(Shape(loss_pct=30))
    lost = sum(t is None for t in got) / len(got)
    assert 0.28 <= lost <= 0.32, lost
    assert all(t is None for t in schedule(Shape(loss_pct=100), n=500))
    assert all(t is not None for t in schedule(Shape(delay_ms=5), n=500))


def test_delay_and_jitter_bound_each_frames_wait_and_spread_over_the_range():
    waits = [t - i for i, t in enumerate(schedule(Shape(delay_ms=100, jitter_ms=20)))]
    assert all(0.080 <= w <= 0.120 for w in waits), (min(waits), max(waits))
    assert min(waits) < 0.085 and max(waits) > 0.115  # uniform over the whole window


def test_reordered_frames_go_at_once_and_overtake_delayed_ones():
    shape = Shape(delay_ms=100, reorder_pct=25)
    rng = random.Random(3)
    at = [shape.release_at(i * 0.01, rng) for i in range(4000)]  # one frame every 10 ms
    now = [i for i, t in enumerate(at) if t == i * 0.01]
    assert 0.22 <= len(now) / len(at) <= 0.28
    overtaken = [i for i in now if i > 0 and at[i] < at[i - 1]]
    assert len(overtaken) > 0.5 * len(now)  # it left before the frame that came before it


def test_a_seed_replays_the_same_schedule():
    shape = Shape(delay_ms=50, jitter_ms=10, loss_pct=5, reorder_pct=5)
    assert schedule(shape, seed=7) == schedule(shape, seed=7) != schedule(shape, seed=8)


@pytest.mark.parametrize("kw,msg", [
    ({"loss_pct": 150}, "loss_pct must be a percentage 0..100, got 150"),
    ({"delay_ms": -1}, "delay_ms must be within 0..60000 ms, got -1"),
    ({"delay_ms": 10, "jitter_ms": 20}, r"jitter_ms \(20\) must not exceed delay_ms \(10\)"),
])
def test_bad_shapes_are_refused_with_the_reason(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Shape(**kw)
