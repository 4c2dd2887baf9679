"""The timer wheel with a clock the test drives: every timer comes out once, never before its
time and at most one slot (10 ms) after, whether it was added near or far ahead; the low
mark never passes a pending timer."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.broker.delivery.timer import CHUNK, SLOT_MS, TimerWheel, deliver_time


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20_000), max_size=300), st.integers(1, 400))
def test_every_timer_once_never_early_at_most_a_slot_late(times, step):
    w = TimerWheel()
    now, out = 0, {}
    pending = list(enumerate(times))
    random.Random(len(times)).shuffle(pending)
    for qoff, at in pending[:len(pending) // 2]:  # some added up front ...
        w.add(at, qoff)
    later, next_add = pending[len(pending) // 2:], 0
    while now <= 21_000 or later:
        while later and now >= next_add:  # ... the rest while time runs
            qoff, at = later.pop()
            w.add(max(at, now), qoff)
            times[qoff] = max(at, now)
            next_add += 50
        for qoff in w.due(now):
            assert qoff not in out
            out[qoff] = now
            w.done(qoff)
        now += step
    assert sorted(out) == list(range(len(times)))
    for qoff, at in enumerate(times):
        assert at <= out[qoff] < at + SLOT_MS + step, (qoff, at, out[qoff])
    assert len(w) == 0 and w.counts == {}


def test_the_low_mark_stays_below_every_pending_timer():
    w = TimerWheel()
    for qoff in range(3 * CHUNK):
        w.add(1000 + qoff, qoff)
    assert w.low_mark(3 * CHUNK) == 0
    for qoff in w.due(1000 + CHUNK + 5):
        w.done(qoff)
    assert w.low_mark(3 * CHUNK) == CHUNK  # offset CHUNK + 6 on are pending
    for qoff in w.due(10 ** 9):
        w.done(qoff)
    assert w.low_mark(3 * CHUNK) == 3 * CHUNK


def test_the_three_timer_properties():
    assert deliver_time({"TIMER_DELIVER_MS": "5000"}, 1000) == 5000
    assert deliver_time({"TIMER_DELAY_SEC": "3"}, 1000) == 4000
    assert deliver_time({"TIMER_DELAY_MS": "250"}, 1000) == 1250
    assert deliver_time({"KEYS": "k"}, 1000) is None


def test_a_backlog_comes_out_in_limited_rounds_in_time_order():
    w = TimerWheel()
    for qoff in range(1000):
        w.add(qoff, qoff)  # all due by 1000
    rounds = []
    while batch := w.due(2000, limit=300):
        rounds.append(batch)
    assert [len(r) for r in rounds] == [300, 300, 300, 100]
    assert sum(rounds, []) == list(range(1000))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=200))
def test_a_clock_that_jumps_to_the_next_due_time_misses_no_timer(times):
    """The timer service rests until next_due_ms (#32: no tick every 5 ms when idle). A
    clock that jumps straight there (or to the next add) must still see every timer come
    out once, never early and at most one slot late: next_due_ms is never too late."""
    w = TimerWheel()
    half = len(times) // 2
    for qoff, at in enumerate(times[:half]):
        w.add(at, qoff)
    adds = sorted((at // 2, at, qoff) for qoff, at in enumerate(times) if qoff >= half)
    now, out, steps = 0, {}, 0
    while len(out) < len(times):
        while adds and adds[0][0] <= now:  # added at half its due time
            _, at, qoff = adds.pop(0)
            w.add(at, qoff)
        for qoff in w.due(now):
            out[qoff] = now
            w.done(qoff)
        due = w.next_due_ms()
        nxt = min(x for x in (due, adds[0][0] if adds else None) if x is not None) \
            if due is not None or adds else now + 1
        now = max(now + 1, nxt)
        steps += 1
        assert steps < 10 * len(times) + 100  # jumps, not a tick per millisecond
    for qoff, at in enumerate(times):
        assert at <= out[qoff] < at + SLOT_MS, (qoff, at, out[qoff])
    assert w.next_due_ms() is None


def test_a_resting_timer_service_wakes_when_a_timer_message_is_stored(tmp_path):
    """Resting (nothing pending) for up to IDLE_S, the service is woken by the next timer
    message the store dispatches: it does not sleep the rest out."""
    import asyncio

    from ledgermq.broker import Broker
    from ledgermq.broker.access.system_topics import TIMER_TOPIC
    from ledgermq.broker.config import load_broker_config
    from ledgermq.broker.delivery.timer import IDLE_S
    from ledgermq.broker.long_poll import PullHolds

    async def main():
        bcfg, scfg, _ = load_broker_config(None, {
            "storePathRootDir": str(tmp_path / "store"), "listenPort": "0",
            "mappedFileSizeCommitLog": str(1 << 20)})
        b = Broker(bcfg, scfg, standalone=True)
        b.store.open()
        try:
            b.holds = PullHolds(asyncio.get_running_loop())
            b.store.listeners.append(b.holds.notify)
            b.timer.tick()  # the wheel built, nothing pending
            resting = asyncio.ensure_future(b.timer._rest())
            await asyncio.sleep(0.05)
            assert not resting.done()  # resting: nothing is due
            woke = asyncio.get_running_loop().time()
            b.store.append(b.store.encode(TIMER_TOPIC, 0, [b"x"]))
            await asyncio.wait_for(resting, IDLE_S)
            assert asyncio.get_running_loop().time() - woke < IDLE_S / 4
        finally:
            b.store.close()
    asyncio.run(main())
