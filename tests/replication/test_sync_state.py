"""The master's SyncStateSet tracking (S1-2): shrink after haMaxTimeSlaveNotCatchUp,
expand at the confirm offset (never for a learner), one change in flight, and the
acknowledgement rules (allAckInSyncStateSet, inSyncReplicas, minInSyncReplicas)."""
from ledgermq.replication.autoswitch.sync_state import (
    ProposeSyncStateSet, SyncConfig, SyncStateTracker,
)


def tracker(**kw):
    cfg = SyncConfig(max_not_catch_up_ms=1000, **kw)
    return SyncStateTracker(1, (1, 2, 3), set_epoch=5, master_end=100, now=0, config=cfg,
                            learners=frozenset({4}))


def test_a_slave_that_does_not_catch_up_is_dropped_then_readmitted():
    t = tracker()
    t.ack(2, 100, now=10)
    t.ack(3, 100, now=10)
    t.appended(500)
    t.ack(2, 500, now=900)  # 3 stays at 100
    assert t.tick(1500) == [ProposeSyncStateSet((1, 2), 5)]
    assert t.tick(1600) == []  # one change in flight
    t.applied((1, 2), 6, now=1700)
    assert t.confirm_offset == 500
    assert t.ack(3, 400, now=1800) == []  # below the confirm offset: not yet
    assert t.ack(3, 500, now=1900) == [ProposeSyncStateSet((1, 2, 3), 6)]


def test_a_learner_never_joins():
    t = tracker()
    assert t.ack(4, 10_000, now=5) == []


def test_a_refused_change_keeps_the_set():
    t = tracker()
    t.appended(200)
    assert t.tick(2000)
    t.applied(None, 0, now=2001)
    assert t.members == (1, 2, 3) and t.set_epoch == 5


def test_acknowledgement_rules():
    t = tracker(all_ack=True)
    t.ack(2, 100, 1)
    assert t.acknowledged(100) is False  # 3 has not acked
    t.ack(3, 100, 1)
    assert t.acknowledged(100) is True
    some = tracker(in_sync_replicas=2)
    some.ack(2, 100, 1)
    assert some.acknowledged(100) is True  # master + one slave
    few = SyncStateTracker(1, (1,), 1, 100, 0, SyncConfig(min_in_sync_replicas=2))
    assert few.acknowledged(50) is None  # too few in-sync replicas: a clear refusal
