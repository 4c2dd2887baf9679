"""Controller mode's transfer cores driven by hand over in-memory logs of 4-byte-sized
records: a slave with a foreign tail cuts it where the epoch histories part, copies the
master's log with its epochs, chunks never cross an epoch, the confirm offset reaches the
slave, and sends are acknowledged by the SyncStateSet's rules."""
import struct

from ledgermq.replication.autoswitch.sync_state import SyncConfig, SyncStateTracker
from ledgermq.replication.autoswitch.transfer import (
    AutoSwitchMaster, AutoSwitchSlave, Confirmed, EpochTransfer, RecordEpoch, SendEpochs,
    SendHandshake, TruncateLog,
)
from ledgermq.replication.ha import Append, Complete, HAConfig, Report, SyncStatus

CFG = HAConfig(segment_size=1 << 20, transfer_batch=64, window=1 << 16, heartbeat_ms=100)


def records(tag: bytes, n: int) -> bytes:
    body = tag * 12
    return b"".join(struct.pack(">i", 4 + len(body)) + body for _ in range(n))


def whole_prefix(data: bytes) -> int:
    pos = 0
    while pos + 4 <= len(data) and pos + struct.unpack_from(">i", data, pos)[0] <= len(data):
        pos += struct.unpack_from(">i", data, pos)[0]
    return pos


def run_link(master: AutoSwitchMaster, master_log: bytes, slave: AutoSwitchSlave,
             slave_log: bytearray, now: int = 0) -> list:
    """Carry every message between the two cores until they are quiet; returns the slave's
    actions (besides appends and reports)."""
    seen, to_master, to_slave = [], [], []
    master.connected(1, now)
    to_master += slave.connected(now)
    while to_master or to_slave:
        while to_master:
            a = to_master.pop(0)
            if isinstance(a, SendHandshake):
                acts = master.handshake(1, a.slave_id, a.learner, a.from_last_file, now)
            elif isinstance(a, Report):
                acts = master.report(1, a.offset, now)
            else:
                continue
            to_slave += acts
        while to_slave:
            a = to_slave.pop(0)
            if isinstance(a, SendEpochs):
                acts = slave.master_epochs(list(a.epochs), a.log_end, now)
            elif isinstance(a, EpochTransfer):
                seen.append(a)
                acts = slave.data(a.offset, a.size, a.epoch, a.epoch_start, a.confirm,
                                  master_log[a.offset:a.offset + a.size], now)
            else:
                continue
            for x in acts:
                if isinstance(x, TruncateLog):
                    seen.append(x)
                    del slave_log[x.offset:]
                elif isinstance(x, Append):
                    n = whole_prefix(x.data)
                    slave_log += x.data[:n]
                    to_master += slave.appended(len(slave_log), now)
                elif isinstance(x, Report):
                    to_master.append(x)
                else:
                    seen.append(x)
    return seen


def test_a_diverged_slave_cuts_at_the_epoch_split_and_copies_the_master():
    e1, e2_old, e2_new = records(b"a", 10), records(b"x", 5), records(b"b", 6)
    # the old master (now our slave) wrote epoch 1, then 5 records of epoch 2 nobody got;
    # the new master took over at the end of epoch 1 and wrote epoch 2 and then epoch 3
    master_log = e1 + e2_new + records(b"c", 4)
    split = len(e1)
    master_epochs = [(1, 0), (3, split), (4, split + len(e2_new))]
    tracker = SyncStateTracker(1, (1,), 1, len(master_log), 0, SyncConfig())
    master = AutoSwitchMaster(CFG, master_epochs, 0, len(master_log), tracker, 0)
    slave_log = bytearray(e1 + e2_old)
    slave = AutoSwitchSlave(CFG, 2, [(1, 0), (2, split)], len(slave_log), 0)
    seen = run_link(master, master_log, slave, slave_log)
    assert TruncateLog(split) in seen  # not to its own max offset
    assert bytes(slave_log) == master_log
    assert slave.epochs == master_epochs
    assert [a for a in seen if isinstance(a, RecordEpoch)] == [RecordEpoch(3, split),
                                                                RecordEpoch(4, split + len(e2_new))]
    for t in (a for a in seen if isinstance(a, EpochTransfer)):  # never across an epoch
        start, end = t.epoch_start, t.offset + t.size
        nxt = [s for _, s in master_epochs if s > start]
        assert not nxt or end <= nxt[0]


def test_the_known_bug_keeps_the_foreign_tail():
    e1, e2_old, e2_new = records(b"a", 10), records(b"x", 5), records(b"b", 6)
    master_log = e1 + e2_new
    tracker = SyncStateTracker(1, (1,), 1, len(master_log), 0, SyncConfig())
    master = AutoSwitchMaster(CFG, [(1, 0), (3, len(e1))], 0, len(master_log), tracker, 0)
    slave_log = bytearray(e1 + e2_old)
    slave = AutoSwitchSlave(CFG, 2, [(1, 0), (2, len(e1))], len(slave_log), 0,
                            bug="truncate-to-own-max")
    run_link(master, master_log, slave, slave_log)
    assert bytes(slave_log[:len(e1) + len(e2_old)]) != master_log[:len(e1) + len(e2_old)]


def test_sends_wait_for_the_sync_state_set_and_the_confirm_offset_reaches_slaves():
    log = records(b"a", 8)
    tracker = SyncStateTracker(1, (1, 2), 1, len(log), 0, SyncConfig(all_ack=True))
    master = AutoSwitchMaster(CFG, [(1, 0)], 0, len(log), tracker, 0)
    slave_log = bytearray()
    slave = AutoSwitchSlave(CFG, 2, [], 0, 0)
    assert master.sync(7, len(log), 0) == []  # slave 2 has not acked
    run_link(master, log, slave, slave_log)
    assert bytes(slave_log) == log
    assert not master.waiters  # acknowledged once slave 2 acked everything
    beat = [a for a in master.tick(500) if isinstance(a, EpochTransfer)]
    assert beat and beat[0].size == 0 and beat[0].confirm == len(log)
    acts = slave.data(beat[0].offset, 0, beat[0].epoch, beat[0].epoch_start, beat[0].confirm,
                      b"", 500)
    assert Confirmed(len(log)) in acts  # consumers on the slave may now see it all
    few = SyncStateTracker(1, (1,), 1, 0, 0, SyncConfig(min_in_sync_replicas=2))
    lonely = AutoSwitchMaster(CFG, [(1, 0)], 0, 0, few, 0)
    assert lonely.sync(9, 10, 0) == [Complete(9, SyncStatus.NOT_ENOUGH_REPLICAS)]


def test_a_slave_always_10_ms_behind_under_steady_load_stays_in_the_set():
    """S1-2: a slave catches up when its ack reaches the master's end *at a transfer*, not
    the master's end now. Under steady load a healthy slave acks each push a few ms after
    it, by which time the master has appended more: it never reaches the current end, yet
    must stay in the SyncStateSet (issue #28: it was proposed out at 15 s, for good)."""
    from ledgermq.replication.autoswitch.sync_state import ProposeSyncStateSet
    tracker = SyncStateTracker(1, (1, 2), 1, 0, 0, SyncConfig(max_not_catch_up_ms=3000))
    master = AutoSwitchMaster(CFG, [(1, 0)], 0, 0, tracker, 0)
    master.connected(1, 0)
    master.handshake(1, 2, False, False, 0)
    master.report(1, 0, 0)
    end, proposals = 0, []
    for step in range(1, 1001):  # 10 s: a write every 10 ms, each acked 8 ms later
        now = step * 10
        acked_end, end = end, end + 100
        pushed = [a for a in master.appended(end, now) if isinstance(a, EpochTransfer)]
        assert pushed and pushed[-1].offset + pushed[-1].size == end
        proposals += master.tick(now + 1)
        # the ack of the previous push arrives after this write: always one write behind
        proposals += master.report(1, acked_end, now + 8)
    assert not [p for p in proposals if isinstance(p, ProposeSyncStateSet)], proposals
    assert tracker.members == (1, 2)
    # a slave that stops acking is still dropped after haMaxTimeSlaveNotCatchUp
    for step in range(1001, 1400):
        end += 100
        master.appended(end, step * 10)
        proposals += master.tick(step * 10 + 1)
    assert ProposeSyncStateSet((1,), 1) in proposals
