"""The classic-HA and control-node cores on their own: the edges the simulator's random
runs reach only by chance."""
from ledgermq.replication.checkpoint import (
    ControlConfig, GroupControl, Promote, Resolution, View,
)
from ledgermq.replication.checkpoint.replica import (
    CheckpointReplica, Lead, Replay, Truncate,
)
from ledgermq.replication.ha import (
    Append, Close, Complete, Disconnect, HAConfig, HAMaster, HASlave, Heartbeat, Report,
    StartAt, SyncStatus, Transfer,
)

SEG = 1000


def cfg(**kw):
    return HAConfig(segment_size=SEG, transfer_batch=400, window=2000, heartbeat_ms=100,
                    housekeeping_ms=1000, sync_timeout_ms=500, fallbehind_max=5000, **kw)


def test_slave_asking_from_zero_starts_at_the_masters_last_segment():
    m = HAMaster(cfg(), log_end=2500, now=0)
    m.connected(1, 0)
    out = m.report(1, 0, now=1)
    assert out[0] == Transfer(1, 2000, 400) and out[1] == Transfer(1, 2400, 100)
    s = HASlave(cfg(), max_offset=0, now=0)
    s.connected(0)
    acts = s.frame(2000, 3, b"abc", now=2)
    assert acts[0] == StartAt(2000) and acts[1] == Append(2000, b"abc")


def test_checkpoint_mode_an_empty_slave_copies_the_masters_whole_log():
    """A member of the consistent checkpoint holds the master's log, so under S3 an empty
    slave is fed from where the master's log begins (here after retention), not from its
    last segment as under S2."""
    m = HAMaster(cfg(checkpoint=True), log_end=2500, now=0)
    m.connected(1, 0)
    out = m.report(1, 0, now=1, slave_id=1, log_begin=1000)
    transfers = [a for a in out if isinstance(a, Transfer)]
    assert transfers[0] == Transfer(1, 1000, 400)
    m2 = HAMaster(cfg(checkpoint=True), log_end=2500, now=0)
    m2.connected(1, 0)
    assert [a for a in m2.report(1, 0, now=1, slave_id=1) if isinstance(a, Transfer)][0] == \
        Transfer(1, 0, 400)


def test_slave_drops_the_connection_on_an_offset_mismatch():
    s = HASlave(cfg(), max_offset=500, now=0)
    s.connected(0)
    out = s.frame(600, 10, b"x" * 10, now=1)
    assert len(out) == 1 and isinstance(out[0], Disconnect) and "expected 500" in out[0].reason


def test_slave_keeps_an_unfinished_message_for_the_next_chunk():
    s = HASlave(cfg(), max_offset=0, now=0)
    s.connected(0)
    assert s.frame(0, 5, b"01234", 1) == [Append(0, b"01234")]
    assert s.appended(3, 1) == [Report(3)]  # the driver kept 3 whole bytes
    assert s.frame(5, 2, b"56", 2) == [Append(3, b"3456")]


def test_push_stops_at_segment_ends_and_at_the_window():
    m = HAMaster(cfg(), log_end=5000, now=0)
    m.connected(1, 0)
    out = m.report(1, 900, now=1)
    assert out[0] == Transfer(1, 900, 100)  # up to the segment end
    assert sum(t.size for t in out) == 2000  # window past the ack
    more = m.report(1, 1900, now=2)
    assert more and more[0].offset == 2900


def test_sync_master_answers_slave_not_available_at_once():
    m = HAMaster(cfg(), log_end=100, now=0)
    assert m.sync(1, 100, now=0) == [Complete(1, SyncStatus.SLAVE_NOT_AVAILABLE)]
    m.connected(1, 0)
    m.report(1, 100, now=0)
    m.appended(9000, now=1)  # the slave is now 8900 behind, more than fallbehind_max
    assert m.sync(2, 9000, now=1) == [Complete(2, SyncStatus.SLAVE_NOT_AVAILABLE)]


def test_sync_master_waits_for_the_ack_then_times_out():
    m = HAMaster(cfg(), log_end=100, now=0)
    m.connected(1, 0)
    m.report(1, 100, now=0)
    m.appended(200, now=1)
    m.appended(300, now=2)
    assert m.sync(1, 200, now=1) == [] and m.sync(2, 300, now=2) == []
    out = m.report(1, 250, now=3)
    assert Complete(1, SyncStatus.OK) in out and all(
        not isinstance(a, Complete) or a.request_id != 2 for a in out)
    assert Complete(2, SyncStatus.TIMEOUT) in m.tick(503)


def test_master_heartbeats_idle_links_and_expires_silent_ones():
    m = HAMaster(cfg(), log_end=100, now=0)
    m.connected(1, 0)
    m.report(1, 100, now=0)
    assert Heartbeat(1, 100) in m.tick(150)
    assert any(isinstance(a, Close) for a in m.tick(1200))
    assert m.links == {}


def test_a_slave_ahead_of_the_master_is_refused():
    m = HAMaster(cfg(), log_end=100, now=0)
    m.connected(1, 0)
    out = m.report(1, 200, now=0)
    assert isinstance(out[0], Close) and "holds data the master does not" in out[0].reason


def test_checkpoint_is_the_min_over_members_and_never_moves_back():
    m = HAMaster(cfg(checkpoint=True), log_end=0, now=0)
    m.appended(1000, 0)
    for link, sid in ((2, 8), (1, 7)):
        m.connected(link, 0)
        m.report(link, 0 if sid == 8 else 600, 0, slave_id=sid)
    assert m.checkpoint == 0 and set(m.members) == {7, 8}
    m.report(2, 400, 1, slave_id=8)
    assert m.checkpoint == 400
    m.disconnected(2)  # an absent member holds the checkpoint back
    m.report(1, 1000, 2, slave_id=7)
    assert m.checkpoint == 400
    m.sync(5, 900, 2)
    assert Complete(5, SyncStatus.TIMEOUT) in m.tick(600)


def test_a_catching_up_slave_joins_only_once_it_holds_the_masters_log_as_it_began():
    """The checkpoint a new master gets may lag what its predecessor acknowledged (its last
    advance may not have reached the control node): a joining slave must hold the new
    master's log as it was when it began leading, not only that checkpoint."""
    m = HAMaster(cfg(checkpoint=True), log_end=1000, now=0, checkpoint=800, members={7: 800})
    m.connected(1, 0)
    m.report(1, 300, 0, slave_id=9)
    assert 9 not in m.members and m.checkpoint == 800
    m.report(1, 900, 1, slave_id=9)  # holds the checkpoint, not what may be acknowledged
    assert 9 not in m.members
    m.report(1, 1000, 2, slave_id=9)
    assert m.members[9] == 1000


def _view(ctl, addr, wants=False, epoch=0, end=0, now=0, cp=0, members=None):
    view, _ = ctl.heartbeat(addr, wants, epoch, end, now, cp, members)
    return view


def test_control_node_fails_over_to_the_best_member_and_resolves_pending():
    ctl = GroupControl(ControlConfig(master_timeout_ms=100), now=0)
    assert _view(ctl, "m", wants=True).role == "MASTER"
    for addr, end in (("a", 500), ("b", 700)):
        assert _view(ctl, addr, epoch=1, end=end).role == "SLAVE"
    _view(ctl, "m", wants=True, epoch=1, end=900, cp=400, members=[2, 3])
    ok, _ = ctl.cache_message(1, 800, 850, "cached-1", b"z" * 50)
    assert ok
    assert ctl.resolve(1, 300) is Resolution.DONE  # under the checkpoint
    assert ctl.resolve(1, 880) is Resolution.UNKNOWN  # no failover yet
    for addr, end in (("a", 500), ("b", 700)):
        _view(ctl, addr, epoch=1, end=end, now=150)
    out = ctl.tick(150)
    promote = next(a for a in out if isinstance(a, Promote))
    assert promote.addr == "b" and promote.epoch == 2 and len(promote.replay) == 1
    assert _view(ctl, "a", epoch=1, end=500, now=160).role == "WAIT"  # failover under way
    assert not ctl.cache_message(1, 900, 950, "late", b"y")[0]  # a deposed master's cache
    ctl.promoted(3, 2, takeover=700, replayed=[(800, 700, 750)], log_end=750)
    assert ctl.resolve(1, 650) is Resolution.UNKNOWN  # in the new log, not yet covered
    assert ctl.resolve(1, 880) is Resolution.RESEND  # past the takeover
    assert ctl.resolve(1, 850, "cached-1") is Resolution.DONE  # replayed
    old = _view(ctl, "m", wants=True, epoch=1, end=900, now=200)
    assert old.role == "SLAVE" and old.truncate_to == 700 and old.master_addr == "b"


def test_control_node_waits_when_no_member_is_left():
    ctl = GroupControl(ControlConfig(master_timeout_ms=100), now=0)
    _view(ctl, "m", wants=True)
    _view(ctl, "a", epoch=1, end=500, now=150)  # never a member
    assert ctl.tick(150) == []


def test_a_replica_restarted_mid_promotion_rolls_back_and_replays_again():
    r = CheckpointReplica(epoch=1)
    p = Promote("b", 3, 2, (), 400, ())
    assert isinstance(r.on_promote(p, 700)[-1], Replay)
    restarted = CheckpointReplica(epoch=1, promotion=r.promotion)  # crash: nothing answered
    assert restarted.on_promote(p, 730)[:2] == [Truncate(700), Replay(p, 700)]
    # a view sent before the promotion does not undo it
    assert restarted.on_view(View(1, "SLAVE", 3, "m", 400, (), None), 730) == []
    lead = restarted.on_view(View(2, "MASTER", 3, None, 400, (), None), 750)
    assert isinstance(lead[-1], Lead) and lead[-1].epoch == 2


def test_a_straddling_cached_batch_keeps_only_its_replayed_part():
    """A batch cached at [800, 900) straddles the takeover 850: the new master replays its
    part from 850 on, and the control node keeps exactly that part (re-keyed), so a second
    failover does not replay the first messages again."""
    ctl = GroupControl(ControlConfig(master_timeout_ms=100), now=0)
    _view(ctl, "m", wants=True)
    _view(ctl, "b", epoch=1, end=850)
    _view(ctl, "m", wants=True, epoch=1, end=900, cp=700, members=[2])
    data = bytes(range(100))  # the stored messages, [800, 850) then [850, 900)
    assert ctl.cache_message(1, 800, 900, "batch", data)[0]
    _view(ctl, "b", epoch=1, end=850, now=150)
    promote = next(a for a in ctl.tick(150) if isinstance(a, Promote))
    ctl.promoted(promote.slot, 2, takeover=850, replayed=[(800, 850, 900)], log_end=900)
    [kept] = ctl.cache
    assert (kept.offset, kept.end, kept.data) == (850, 900, data[50:])
    assert kept.end - kept.offset == len(kept.data)


def test_checkpoint_slave_reports_only_what_it_flushed_one_flush_at_a_time():
    """S3: a slave's report is its ack, counted in the checkpoint, so it names only what
    is on its disk; the bytes that arrive while a flush runs share the next one."""
    from ledgermq.replication.ha import Flush
    s = HASlave(cfg(checkpoint=True), max_offset=0, now=0)
    assert s.connected(0) == [Report(0)]
    assert s.frame(0, 5, b"01234", 1) == [Append(0, b"01234")]
    assert s.appended(5, 1) == [Flush(5)]  # appended, not yet reported
    assert s.frame(5, 3, b"567", 2) == [Append(5, b"567")]
    assert s.appended(8, 2) == []  # a flush is running: the next one covers these
    assert s.tick(150) == [Report(0)]  # the heartbeat too says only what is flushed
    assert s.flushed_to(5, 151) == [Report(5), Flush(8)]
    assert s.flushed_to(8, 152) == [Report(8)]


def test_checkpoint_slave_reconnecting_with_an_unflushed_tail():
    """It reports its flushed end, is sent the bytes from there, and skips what it holds."""
    from ledgermq.replication.ha import Flush
    s = HASlave(cfg(checkpoint=True), max_offset=8, now=0, flushed=5)
    assert s.connected(0) == [Report(5), Flush(8)]
    assert s.frame(5, 3, b"567", 1) == [Report(5)]  # already held: skipped
    assert s.frame(8, 2, b"89", 2) == [Append(8, b"89")]
    assert s.appended(10, 2) == []  # the flush of 8 still runs
    assert s.flushed_to(8, 3) == [Report(8), Flush(10)]


def test_classic_slave_still_reports_what_it_appended():
    s = HASlave(cfg(), max_offset=0, now=0)
    s.connected(0)
    s.frame(0, 5, b"01234", 1)
    assert s.appended(5, 1) == [Report(5)]


def test_checkpoint_is_published_and_counted_only_once_saved():
    """S3: a new checkpoint is saved first; the slaves, the control node (`saved`) and the
    writes waiting on it learn of it only once the driver says the save is durable."""
    from ledgermq.replication.ha import PublishCheckpoint, SaveCheckpoint
    m = HAMaster(cfg(checkpoint=True), log_end=0, now=0)
    m.appended(1000, 0)
    m.connected(1, 0)
    m.report(1, 0, now=1, slave_id=7)  # joins (it holds the log as the master began)
    assert m.sync(42, 500, now=2) == []
    out = m.report(1, 600, now=3, slave_id=7)
    assert out[0] == SaveCheckpoint(600, ((7, 600),))
    told = [a for a in out if isinstance(a, (Complete, PublishCheckpoint))]
    assert told == [], "told before the checkpoint was saved"
    assert m.saved == 0 and PublishCheckpoint(1, 0) in m.tick(150)  # the heartbeat's too
    assert m.checkpoint_saved(600, now=151) == [PublishCheckpoint(1, 600),
                                               Complete(42, SyncStatus.OK)]
    assert m.checkpoint_saved(600, now=152) == []  # once
