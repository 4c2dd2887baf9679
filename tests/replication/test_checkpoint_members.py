"""The consistent checkpoint's membership lifecycle (S3), on the HAMaster core: a member
that stays silent, or whose copy is gone, stops holding the checkpoint back, but only
once the control node has saved a membership without it."""
from ledgermq.replication.ha import (
    Close, Complete, HAConfig, HAMaster, PublishCheckpoint, SaveCheckpoint, SyncStatus,
)

TIMEOUT = 3000


def master(**kw) -> HAMaster:
    cfg = HAConfig(segment_size=1000, transfer_batch=400, window=2000, heartbeat_ms=100,
                   housekeeping_ms=1000, sync_timeout_ms=60_000, checkpoint=True,
                   member_timeout_ms=TIMEOUT)
    m = HAMaster(cfg, log_end=1000, now=0, checkpoint=400, members={7: 400, 8: 400}, **kw)
    m.connected(1, 0)
    m.report(1, 600, 0, slave_id=7)
    return m


def keep_seven_reporting(m: HAMaster, until: int) -> None:
    for now in range(0, until + 1, 500):
        m.report(1, 900, now, slave_id=7)
        m.tick(now)


def test_a_member_silent_past_the_timeout_is_dropped_once_the_control_node_saved_it():
    m = master()
    m.sync(5, 900, 0)
    keep_seven_reporting(m, TIMEOUT - 500)
    assert m.proposal()[1] == (7, 8) and m.checkpoint == 400  # not silent for long enough
    keep_seven_reporting(m, TIMEOUT)
    version, ids = m.proposal()
    assert ids == (7,)  # proposed without 8 ...
    assert m.checkpoint == 400 and 8 in m.members  # ... but 8 still holds the checkpoint
    out = m.members_saved(version, ids, TIMEOUT + 10)
    assert m.checkpoint == 900 and set(m.members) == {7}
    assert out == [SaveCheckpoint(900, ((7, 900),))]  # persisted before the ack goes out
    assert m.checkpoint_saved(900, TIMEOUT + 20) == [PublishCheckpoint(1, 900),
                                                     Complete(5, SyncStatus.OK)]


def test_an_answer_to_an_older_proposal_drops_nobody():
    m = master()
    keep_seven_reporting(m, TIMEOUT)
    old, ids = m.proposal()
    m.connected(2, TIMEOUT + 1)
    m.report(2, 400, TIMEOUT + 1, slave_id=8)  # 8 is back before the control node saved
    assert m.proposal()[1] == (7, 8)
    assert m.members_saved(old, ids, TIMEOUT + 2) == [] and 8 in m.members
    m.disconnected(2)
    keep_seven_reporting(m, 2 * TIMEOUT + 500)  # silent again: proposed again, newer
    version, ids = m.proposal()
    assert ids == (7,) and version > old
    assert m.members_saved(old, ids, 2 * TIMEOUT + 600) == [] and 8 in m.members
    m.members_saved(version, ids, 2 * TIMEOUT + 600)
    assert 8 not in m.members and m.checkpoint == 900


def test_a_member_whose_copy_is_gone_leaves_and_rejoins_once_it_holds_the_checkpoint():
    m = master()
    m.connected(2, 10)
    m.report(2, 0, 10, slave_id=8)  # its disk was replaced: it starts again from 0
    assert m.members[8] == 400  # the record is not lowered (the checkpoint never moves back)
    version, ids = m.proposal()
    assert ids == (7,)
    m.report(1, 900, 20, slave_id=7)
    assert m.checkpoint == 400  # the lost copy is still counted until the drop is saved
    m.members_saved(version, ids, 30)
    assert set(m.members) == {7} and m.checkpoint == 900
    m.report(2, 500, 40, slave_id=8)
    assert 8 not in m.members  # copying again, below the checkpoint
    m.report(2, 1000, 50, slave_id=8)
    assert m.members[8] == 1000 and m.proposal()[1] == (7, 8)


def test_without_the_control_node_saving_it_a_silent_member_holds_the_checkpoint():
    m = master()
    keep_seven_reporting(m, 3 * TIMEOUT)
    assert m.checkpoint == 400 and 8 in m.members


# ---- the control node's side ---------------------------------------------------------
from ledgermq.replication.checkpoint import (  # noqa: E402
    CheckpointReplica, ControlConfig, GroupControl, Promote, SaveState, View,
)


def beat(ctl, addr, now, *, wants=False, epoch=1, end=0, cp=0, members=None, version=0):
    return ctl.heartbeat(addr, wants, epoch, end, now, cp, members, version)


def group() -> GroupControl:
    ctl = GroupControl(ControlConfig(master_timeout_ms=100), now=0)
    beat(ctl, "m", 0, wants=True, epoch=0)
    for addr in ("a", "b"):
        beat(ctl, addr, 0, end=500)
    return ctl


def test_the_control_node_saves_newer_memberships_only_and_says_which_it_holds():
    ctl = group()
    view, out = beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    assert view.members_version == 50 and [s for s, _ in view.members] == [2, 3]
    assert any(isinstance(a, SaveState) and a.state["members"] == [2, 3] for a in out)
    view, out = beat(ctl, "m", 20, end=900, cp=400, members=[2], version=51)
    assert ctl.state.members == [2] and view.members_version == 51
    view, out = beat(ctl, "m", 30, end=900, cp=400, members=[2, 3], version=50)  # late
    assert ctl.state.members == [2] and view.members_version == 51 and out == []


def test_membership_does_not_change_while_a_failover_is_under_way():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    for addr in ("a", "b"):
        beat(ctl, addr, 150, end=500)
    assert any(isinstance(a, Promote) for a in ctl.tick(150))
    beat(ctl, "m", 160, end=900, cp=400, members=[2], version=51)  # the old master is back
    assert ctl.state.members == [2, 3]


def test_a_broker_whose_log_ends_below_the_checkpoint_is_not_promoted():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    beat(ctl, "a", 150, end=600)
    beat(ctl, "b", 150, end=0)  # its disk was replaced
    promote = next(a for a in ctl.tick(150) if isinstance(a, Promote))
    assert promote.addr == "a"


def test_a_promotion_is_given_up_when_the_chosen_broker_turns_out_empty():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    beat(ctl, "a", 150, end=500)
    beat(ctl, "b", 150, end=700)
    assert next(a for a in ctl.tick(150) if isinstance(a, Promote)).addr == "b"
    beat(ctl, "b", 160, end=0)  # restarted on a replaced disk before it answered
    ctl.tick(170)
    assert ctl.state.promoting is None
    assert next(a for a in ctl.tick(180) if isinstance(a, Promote)).addr == "a"


def test_a_master_restarted_on_an_empty_disk_is_replaced():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    for now in (100, 200):
        beat(ctl, "m", now, wants=True, epoch=0, end=0)  # back at once, with nothing
        for addr in ("a", "b"):
            beat(ctl, addr, now, end=500)
    assert any(isinstance(a, Promote) for a in ctl.tick(200))


def test_a_replica_below_the_checkpoint_neither_leads_nor_takes_over():
    r = CheckpointReplica()
    assert r.on_view(View(1, "MASTER", 1, None, 400, (), None), log_end=0) == []
    assert r.role == "WAIT"
    assert r.on_promote(Promote("b", 1, 2, (), 400, ()), log_end=0) == []
    assert r.promotion is None


def test_a_master_stands_down_for_its_own_epochs_wait_view_only():
    """A WAIT view of an older epoch comes from a control node that has not caught up (a
    stale leader of a control node group): it must not take the group's master away."""
    r = CheckpointReplica()
    r.on_view(View(3, "MASTER", 1, None, 0, (), None), log_end=0)
    assert r.role == "MASTER" and r.epoch == 3
    assert r.on_view(View(2, "WAIT", 1, None, 0, (), None), log_end=0) == []
    assert r.role == "MASTER"
    stand = r.on_view(View(3, "WAIT", 1, None, 0, (), None), log_end=0)  # failing over
    assert r.role == "WAIT" and [type(a).__name__ for a in stand] == ["Stand"]


def test_a_restarted_control_node_keeps_asking_the_broker_it_chose():
    """After a restart the control node knows no broker's log end yet: that is no reason
    to give up a promotion (the chosen broker may have taken over already)."""
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    for addr in ("a", "b"):
        beat(ctl, addr, 150, end=500)
    assert any(isinstance(a, Promote) for a in ctl.tick(150))
    restarted = GroupControl(ControlConfig(master_timeout_ms=100), now=200,
                             state=ctl.state)
    out = restarted.tick(300)
    assert restarted.state.promoting == ctl.state.promoting
    assert any(isinstance(a, Promote) for a in out)


# ---- epochs on the HA link -----------------------------------------------------------
def test_a_slave_following_an_earlier_epoch_is_refused_until_it_follows_this_one():
    """Sim seed 139: a slave cut off in epoch 1 keeps reconnecting to its master's address;
    when that broker leads again in epoch 3, the bytes past epoch 2's takeover differ from
    the slave's. Taking its offset as an ack would count a foreign tail in the checkpoint:
    the master refuses a slave that follows another epoch (it must first take its view,
    and truncation, from the control node)."""
    m = HAMaster(master().config, log_end=1000, now=0, checkpoint=400, members={7: 400},
                 epoch=3)
    m.connected(1, 0)
    out = m.report(1, 900, 1, slave_id=7, epoch=1)
    assert [a for a in out if isinstance(a, Close)] == [out[0]] and "epoch 1" in out[0].reason
    assert len(out) == 1 and m.checkpoint == 400 and m.members == {7: 400}
    assert 1 not in m.links  # nothing more is taken from that link
    m.connected(2, 2)  # back after its view: truncated to the takeover, following epoch 3
    assert SaveCheckpoint(850, ((7, 850),)) in m.report(2, 850, 3, slave_id=7, epoch=3)


# ---- a master restarted in its own epoch -----------------------------------------------
def test_a_master_restarted_in_its_epoch_counts_the_members_the_control_node_saved():
    """Sim seed 751: the master counted a joining slave at once (joining only makes the
    minimum stricter) and its heartbeat named it to the control node, which saved it,
    while the checkpoint file naming it was still being written; the master crashed.
    Restarted in the same epoch from its file alone, it counted the other member only and
    moved the checkpoint past what the joined slave holds, which the control node may
    promote. It must count every member either record names."""
    from ledgermq.replication.checkpoint import Lead, lead_start
    view = Lead(epoch=6, checkpoint=13870, members=((1, 13870), (3, 13870)), slot=2)
    checkpoint, members = lead_start(view, (6, 13870, {3: 13870}))
    assert checkpoint == 13870 and members == {1: 13870, 3: 13870}
    m = HAMaster(master().config, log_end=14479, now=0, checkpoint=checkpoint,
                 members=members, epoch=6)
    m.connected(1, 0)
    m.connected(2, 0)
    m.report(1, 14336, 1, slave_id=1, epoch=6)
    m.report(2, 14387, 2, slave_id=3, epoch=6)
    assert m.checkpoint == 14336  # not past what slot 1 holds
    # its own newer records stay; another epoch's file does not count
    assert lead_start(view, (6, 14000, {3: 14000})) == (14000, {1: 13870, 3: 14000})
    assert lead_start(view, (5, 20000, {4: 20000})) == (13870, {1: 13870, 3: 13870})


def test_a_master_giving_the_group_up_is_failed_over_at_once_to_the_member_it_names():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    beat(ctl, "a", 20, end=600)
    beat(ctl, "b", 20, end=700)
    assert ctl.tick(30) == []  # its heartbeats still come: no failover of its own accord
    assert ctl.hand_over("a", 1, 30, preferred=3)[0] == "a is not the master in epoch 1 " \
        "(the group is in 1)"
    assert ctl.hand_over("m", 0, 30, preferred=3)[0] == "m is not the master in epoch 0 " \
        "(the group is in 1)"
    why, out = ctl.hand_over("m", 1, 30, preferred=2)  # a, though b's log is longer
    assert why is None and ctl.state.promoting == 2
    assert [a.addr for a in out if isinstance(a, Promote)] == ["a"]
    assert any(isinstance(a, SaveState) and a.state["promoting"] == 2 for a in out)
    assert ctl.hand_over("m", 1, 40, preferred=2) == ("a failover is under way", [])


def test_a_hand_over_goes_to_the_longest_member_unless_the_one_named_may_take_over():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    beat(ctl, "a", 20, end=300)  # below the checkpoint: it may not take over
    beat(ctl, "b", 20, end=700)
    why, out = ctl.hand_over("m", 1, 30, preferred=2)
    assert why is None and [a.addr for a in out if isinstance(a, Promote)] == ["b"]


def test_a_hand_over_without_a_slave_holding_the_checkpoint_is_refused_and_changes_nothing():
    ctl = group()
    beat(ctl, "m", 10, end=900, cp=400, members=[2, 3], version=50)
    beat(ctl, "a", 20, end=300)
    beat(ctl, "b", 20, end=300)
    assert ctl.hand_over("m", 1, 30) == ("no live slave holds the checkpoint", [])
    assert ctl.state.promoting is None and ctl.state.master == 1
