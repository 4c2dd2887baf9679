"""The master's SyncStateSet tracking (S1-2): shrink after haMaxTimeSlaveNotCatchUp,
expand at the confirm offset (never for a learner), one change in flight, and the
acknowledgement rules (allAckInSyncStateSet, inSyncReplicas, minInSyncReplicas)."""
from ledgermq.controller.metadata import (
    AlterSyncStateSet, ControllerMetadata, ElectMaster, RegisterBroker,
    refusal_may_have_applied,
)
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


def test_a_member_that_comes_back_as_a_learner_leaves_the_set():
    t = tracker()
    t.learners = t.learners | {3}
    assert t.tick(10) == [ProposeSyncStateSet((1, 2), 5)]


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
    some = tracker(all_ack=False, in_sync_replicas=2)
    some.ack(2, 100, 1)
    assert some.acknowledged(100) is True  # master + one slave
    default = tracker(in_sync_replicas=2)  # all_ack by default: inSyncReplicas is ignored
    default.ack(2, 100, 1)
    assert default.acknowledged(100) is False
    few = SyncStateTracker(1, (1,), 1, 100, 0, SyncConfig(min_in_sync_replicas=2))
    assert few.acknowledged(50) is None  # too few in-sync replicas: a clear refusal


def two_member_tracker(master_end=100):
    return SyncStateTracker(1, (1, 2), 5, master_end, 0,
                            SyncConfig(all_ack=True, proposal_timeout_ms=300))


def test_while_a_change_is_in_flight_old_and_new_members_must_ack():
    t = two_member_tracker()
    t.ack(2, 100, 1)
    t.appended(200)
    t.ack(2, 200, 2)
    assert t.ack(3, 200, 3) == [ProposeSyncStateSet((1, 2, 3), 5)]
    t.appended(300)
    t.ack(2, 300, 4)
    # the controller may hold (1, 2, 3) already: electing 3 must not lose this write
    assert t.acknowledged(300) is False
    t.ack(3, 300, 5)
    assert t.acknowledged(300) is True


def test_a_new_master_admits_a_slave_only_once_it_holds_the_log_end_at_takeover():
    t = two_member_tracker(master_end=1000)  # member 2's acks unknown: confirm reads 0
    assert t.ack(3, 10, 1) == []  # may lack what the previous master acknowledged
    assert t.ack(3, 1000, 2) == [ProposeSyncStateSet((1, 2, 3), 5)]


def test_a_stale_refusal_waits_for_the_controllers_view():
    t = two_member_tracker()
    t.ack(3, 100, 1)
    t.applied(None, 5, now=2, maybe_applied=True)  # maybe a copy of a change that did apply
    assert t.pending is not None and t.ack_set == (1, 2, 3)
    t.controller_view((1, 2, 3), 6, now=3)
    assert t.pending is None and t.members == (1, 2, 3) and t.set_epoch == 6


def test_an_unanswered_change_is_asked_again():
    t = two_member_tracker()
    first = t.ack(3, 100, 1)
    assert first and t.tick(200) == []
    assert t.tick(400) == first  # the set epoch fences the copies


def test_a_deposed_masters_refused_expansion_still_waits_for_the_new_member():
    """Sim seed 1489: the controller applied master 1's expansion to (1, 2), elected 2,
    then refused 1's re-sent copy as "not the master". That refusal does not say the
    expansion never applied: 1 must not fall back to acknowledging alone."""
    md = ControllerMetadata()
    a, b = (md.apply(RegisterBroker("c", "g", addr)).data["brokerId"] for addr in "ab")
    md.apply(ElectMaster("g", alive=(a,)))
    epoch = md.groups["g"].set_epoch
    assert md.apply(AlterSyncStateSet("g", a, 1, (a, b), epoch)).ok  # its answer is lost
    md.apply(ElectMaster("g", alive=(b,), operator=True, preferred=b))
    copy = md.apply(AlterSyncStateSet("g", a, 1, (a, b), epoch))  # the re-sent copy
    assert not copy.ok and "not the master" in copy.error

    t = SyncStateTracker(a, (a,), epoch, master_end=100, now=0, config=SyncConfig())
    assert t.ack(b, 100, now=1) == [ProposeSyncStateSet((a, b), epoch)]
    t.appended(200)  # a write the new master b does not hold
    t.applied(None, epoch, now=2, maybe_applied=refusal_may_have_applied(copy.error))
    assert t.acknowledged(200) is False


def test_only_an_invalid_change_is_refused_for_sure():
    """Sim seed 1208: the controller leader lost its term before committing master 1's
    expansion and answered TERM_CHANGED; its successor committed it all the same. Any
    refusal but an invalid change may answer a copy that applies: it keeps both sets."""
    md = ControllerMetadata()
    a = md.apply(RegisterBroker("c", "g", "a")).data["brokerId"]
    md.apply(ElectMaster("g", alive=(a,)))
    epoch = md.groups["g"].set_epoch
    invalid = [md.apply(AlterSyncStateSet("g", a, 1, (a, 99), epoch)).error,
               md.apply(AlterSyncStateSet("g", a, 1, (99,), epoch)).error,
               md.apply(AlterSyncStateSet("other", a, 1, (a,), epoch)).error]
    assert not any(refusal_may_have_applied(e) for e in invalid), invalid
    for unsure in ("TERM_CHANGED", "NOT_LEADER", "the controller group did not commit "
                   "the command in time (no quorum?)",
                   md.apply(AlterSyncStateSet("g", a, 1, (a,), epoch - 1)).error):
        assert refusal_may_have_applied(unsure), unsure
