"""DLedger drivers of three in-process replicas over real sockets: what the leader appends
in one loop iteration travels as one Raft entry and lands byte for byte on the followers;
a range the core refuses leaves no stray bytes in the leader's commit log."""
import asyncio
import logging
import os
import re
import time

import pytest

from ledgermq.drivers.dledger import DLedgerDriver
from ledgermq.localcluster.cluster import free_ports
from ledgermq.replication.raft import Code, Complete, RaftConfig, Role
from ledgermq.store import DiskFullError, MessageStore

from ..store.conftest import small_config
from ..wait import until

FAST = RaftConfig(election_timeout_ms=150, heartbeat_ms=30)


def open_driver(tmp_path, name, peers, segment=1 << 20, **kw) -> DLedgerDriver:
    store = MessageStore(small_config(tmp_path / name / "store",
                                      mappedFileSizeCommitLog=segment))
    store.open()
    return DLedgerDriver(store, name, peers, tmp_path / name / "raft", lambda role: None, FAST,
                         **kw)


async def start_group(tmp_path, segment=1 << 20, **kw):
    ports = free_ports(3)
    peers = {f"n{i}": f"127.0.0.1:{p}" for i, p in enumerate(ports)}
    drivers = []
    for name in peers:
        d = open_driver(tmp_path, name, peers, segment, **kw)
        await d.start()
        drivers.append(d)

    def leader():
        leaders = [d for d in drivers if d.node.role is Role.LEADER]
        return leaders[0] if len(leaders) == 1 and leaders[0].node.commit >= 0 else None
    return drivers, await until(leader, "a leader that committed")


async def stop_group(drivers):
    for d in drivers:
        await d.stop()
        d.store.close()


def append(store: MessageStore, n: int) -> tuple[int, int]:
    start = store.commitlog.max_offset
    result = store.append(store.encode("T", n % 4, [os.urandom(50 + n)]))
    assert result.ok
    return start, result.end_offset


def log_bytes(d: DLedgerDriver) -> bytes:
    return d.log.read_span(d.store.commitlog.min_offset, d.store.commitlog.max_offset)


@pytest.mark.timeout(60)
def test_appends_of_one_iteration_become_one_entry_on_every_replica(tmp_path):
    async def run():
        drivers, leader = await start_group(tmp_path)
        try:
            entries_before = leader.log.end
            futs = [leader.propose_range(*append(leader.store, n)) for n in range(50)]
            done = await asyncio.wait_for(asyncio.gather(*futs), 10)
            assert {d.code for d in done} == {Code.SUCCESS}
            assert leader.log.end == entries_before + 1  # one entry for the 50 appends
            await until(lambda: all(
                d.node.commit >= leader.node.commit and
                d.store.commitlog.max_offset >= leader.store.commitlog.max_offset
                for d in drivers), "every replica committed and holds the entry")
            for d in drivers:
                assert log_bytes(d) == log_bytes(leader)
                assert d.store.max_offset_in_queue("T", 0) == leader.store.max_offset_in_queue("T", 0)
            assert sum(leader.store.max_offset_in_queue("T", q) for q in range(4)) == 50
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(60)
def test_a_refused_range_is_cut_from_the_leaders_log(tmp_path):
    async def run():
        drivers, leader = await start_group(tmp_path)
        try:
            committed = await leader.propose_range(*append(leader.store, 1))
            assert committed.code is Code.SUCCESS
            keep = leader.store.commitlog.max_offset
            core_propose = leader.node.propose
            # the core refuses as it does during a leadership transfer
            leader.node.propose = lambda rid, data, now, **kw: [Complete(rid, Code.NOT_LEADER)]
            futs = [leader.propose_range(*append(leader.store, n)) for n in range(5)]
            done = await asyncio.wait_for(asyncio.gather(*futs), 10)
            assert {d.code for d in done} == {Code.NOT_LEADER}
            assert leader.store.commitlog.max_offset == keep == leader.log.log_end
            leader.node.propose = core_propose
            again = await leader.propose_range(*append(leader.store, 7))
            assert again.code is Code.SUCCESS  # the log goes on from where it was cut
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(60)
def test_a_follower_whose_commit_log_lost_its_tail_drops_those_entries_and_is_refilled(
        tmp_path):
    """After a crash recovery cut a torn tail, the raft index still lists entries whose bytes
    are gone: they are dropped on start (and the saved commit index clamped), the follower
    holds less than it acknowledged, and the leader refills it byte for byte."""
    async def run():
        drivers, leader = await start_group(tmp_path)
        try:
            for n in range(30):
                assert (await leader.propose_range(*append(leader.store, n))).code is Code.SUCCESS
            await until(lambda: all(d.node.commit == leader.node.commit for d in drivers),
                        "the followers have the commit index too")
            victim = next(d for d in drivers if d is not leader)
            name, peers = victim.self_id, victim.peers
            had = (victim.node.last_term, victim.node.end)
            await victim.stop()
            cut = victim.log.start_of(victim.log.end - 5)  # the last 6 entries' bytes go
            victim.store.truncate(cut)
            victim.store.close()
            drivers.remove(victim)
            store = MessageStore(small_config(tmp_path / name / "store",
                                              mappedFileSizeCommitLog=1 << 20))
            store.open()
            back = DLedgerDriver(store, name, peers, tmp_path / name / "raft",
                                 lambda role: None, FAST)
            assert back.log.log_end == cut and back.node.commit <= back.node.end
            # it votes by the log it had until refilled past it, also after another restart
            assert back.node.promised == had
            assert (tmp_path / name / "raft" / "promise").exists()
            await back.start()
            drivers.append(back)
            await until(lambda: back.node.end >= leader.node.end, "the follower refilled")
            assert back.node.end == leader.node.end
            assert log_bytes(back) == log_bytes(leader)
            await back.stop()  # refilled: the next start forgets the promise
            drivers.remove(back)
            again = DLedgerDriver(store, name, peers, tmp_path / name / "raft",
                                  lambda role: None, FAST)
            assert again.node.promised is None
            assert not (tmp_path / name / "raft" / "promise").exists()
            again.log.close()
            store.close()
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(90)
def test_a_follower_behind_the_leaders_retained_log_restarts_at_its_first_entry(tmp_path):
    """While a follower was down, retention deleted the segments holding the entries it
    needs next, on the other two. The group keeps committing when it comes back (the
    leader no longer reads bytes that are gone), and the follower's store begins afresh at
    the leader's first retained entry, byte for byte the leader's from there on."""
    segment = 64 * 1024

    async def run():
        drivers, leader = await start_group(tmp_path, segment)
        try:
            for n in range(20):
                assert (await leader.propose_range(*append(leader.store, n))).code is Code.SUCCESS
            victim = next(d for d in drivers if d is not leader)
            name, peers = victim.self_id, victim.peers
            await victim.stop()
            victim.store.close()
            drivers.remove(victim)
            for n in range(600):  # ~10 segments more
                assert (await leader.propose_range(*append(leader.store, n))).code is Code.SUCCESS
            for d in drivers:
                await until(lambda: d.node.commit == leader.node.commit, f"{d.self_id} committed")
                d.store.commitlog.flush()
                assert d.store.delete_expired(now=time.time() + 10 ** 9) > 0
            first = leader.log.begin
            assert first > 20 and leader.log.start_of(first) == leader.store.commitlog.min_offset
            # the terms the core reads (without the bytes) end where the entries do
            log = leader.log
            assert [log.term_at(i) for i in range(first - 1, log.end + 2)] == \
                [None] + [log.entry(i).term for i in range(first, log.end + 1)] + [None]
            back = open_driver(tmp_path, name, peers, segment)
            await back.start()
            drivers.append(back)
            for n in range(30):  # the group goes on committing with it back
                done = await asyncio.wait_for(leader.propose_range(*append(leader.store, n)), 5)
                assert done.code is Code.SUCCESS
            await until(lambda: back.node.end == leader.node.end and
                        back.store.commitlog.max_offset == leader.store.commitlog.max_offset,
                        "the follower holds the leader's log")
            assert back.log.begin == first
            assert back.store.commitlog.min_offset == leader.store.commitlog.min_offset
            assert log_bytes(back) == log_bytes(leader)
            for q in range(4):  # its consume queues pick up at the leader's queue offsets
                assert back.store.max_offset_in_queue("T", q) == \
                    leader.store.max_offset_in_queue("T", q)
        finally:
            await stop_group(drivers)
    asyncio.run(run())


STATUS_LINE = re.compile(r"dledger (\w+) \[LEADER\] term=(\d+) ledgerBegin=(-?\d+) "
                         r"ledgerEnd=(-?\d+) committed=(-?\d+) watermarks=\{(.*)\}")


@pytest.mark.timeout(60)
def test_the_leader_logs_its_term_log_range_commit_and_every_peers_watermark(tmp_path, caplog):
    """S0-8, as DLedger operators read it: every status interval (3 s by default, 200 ms
    here) the leader logs term, begin, end, committed index and each replica's watermark
    (its own end included); followers do not."""
    caplog.set_level(logging.INFO, logger="ledgermq.drivers.dledger")

    def lines():
        return [(r.created, STATUS_LINE.search(r.getMessage())) for r in caplog.records
                if STATUS_LINE.search(r.getMessage())]

    async def run():
        drivers, leader = await start_group(tmp_path, status_log_ms=200)
        try:
            for n in range(10):
                assert (await leader.propose_range(*append(leader.store, n))).code is Code.SUCCESS
            node = leader.node
            await until(lambda: all(d.node.commit == node.commit for d in drivers),
                        "every replica committed the appends")
            seen = len(lines())
            last = await until(lambda: len(lines()) > seen + 1 and lines()[-1],
                               "two status lines after the appends")
            _, m = last
            assert m.group(1) == leader.self_id
            assert (int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))) == \
                (node.term, node.begin, node.end, node.commit)
            marks = dict(kv.split(": ") for kv in m.group(6).split(", "))
            assert marks == {d.self_id: str(node.end) for d in drivers}
            times = [t for t, _ in lines()]
            assert all(b - a >= 0.19 for a, b in zip(times, times[1:]))  # one per interval
        finally:
            await stop_group(drivers)
    asyncio.run(run())


def test_the_saved_commit_index_reads_back_and_a_torn_one_reads_as_none(tmp_path):
    from ledgermq.drivers.raft.driver import RaftMeta, read_commit, write_commit
    (tmp_path / "commit").write_text("41")  # an earlier version's text file
    meta = RaftMeta(tmp_path)
    assert meta.commit == 41 and read_commit(tmp_path / "commit") == 41
    meta.save_commit(2**40 + 3, now=1e9)
    assert RaftMeta(tmp_path).commit == 2**40 + 3
    write_commit(tmp_path / "commit", 7)
    raw = bytearray((tmp_path / "commit").read_bytes())
    raw[7] ^= 1  # half of a write reached the disk
    (tmp_path / "commit").write_bytes(bytes(raw))
    assert RaftMeta(tmp_path).commit == -1


@pytest.mark.timeout(60)
def test_a_deposed_leader_drops_its_uncommitted_tail_without_calling_it_damage(tmp_path,
                                                                              caplog):
    """A leader cut off with entries nobody else holds comes back to a new leader that
    committed others at those indexes: its tail is replaced by the new leader's, and no
    "damaged on this disk" warning is logged (that is for committed entries only; the
    push that replaces the tail also commits past it, which once read as damage)."""
    caplog.set_level(logging.WARNING, logger="ledgermq.drivers.raft.driver")

    async def run():
        drivers, old = await start_group(tmp_path)
        sends = {d.self_id: d._send for d in drivers}
        try:
            assert (await old.propose_range(*append(old.store, 1))).code is Code.SUCCESS
            for d in drivers:  # the leader hears nobody and nobody hears it
                d._send = (lambda msg: None) if d is old else (
                    lambda msg, send=sends[d.self_id]: None if msg.dst == old.self_id
                    else send(msg))
            tail = [old.propose_range(*append(old.store, n)) for n in range(2, 6)]
            new = await until(lambda: next((d for d in drivers if d is not old and d.is_leader
                                            and d.node.commit >= 0), None), "a new leader")
            for n in range(6, 12):
                assert (await new.propose_range(*append(new.store, n))).code is Code.SUCCESS
            for d in drivers:
                d._send = sends[d.self_id]
            await until(lambda: not old.is_leader and old.node.commit == new.node.commit
                        == new.log.end == old.log.end, "the old leader following the new")
            assert log_bytes(old) == log_bytes(new)
            assert {c.code for c in await asyncio.gather(*tail)} != {Code.SUCCESS}
        finally:
            await stop_group(drivers)
    asyncio.run(run())
    assert not [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]


def _no_space(real, full: list[bool]):
    """`real`, failing as on a full disk while full[0]."""
    def write(*args, **kw):
        if full[0]:
            raise DiskFullError("no space left on device (test)")
        return real(*args, **kw)
    return write


async def _lone_follower(drivers, leader):
    """Stop one follower: the leader's quorum is then the other one alone."""
    f1, f2 = [d for d in drivers if d is not leader]
    await f2.stop()
    drivers.remove(f2)
    f2.store.close()
    return f1


async def _goes_on(drivers):
    """The two live replicas elect a leader that commits, and hold the same log."""
    now = await until(lambda: next((d for d in drivers if d.is_leader and
                                    d.node.commit >= d.log.end), None),
                      "a leader that committed its term's entry")
    assert (await now.propose_range(*append(now.store, 2))).code is Code.SUCCESS
    other = next(d for d in drivers if d is not now)
    await until(lambda: other.store.commitlog.max_offset == now.store.commitlog.max_offset,
                "both hold the log")
    assert log_bytes(other) == log_bytes(now)


@pytest.mark.timeout(60)
def test_entries_a_follower_could_not_write_are_not_acknowledged_until_it_has(tmp_path):
    """A follower whose disk refuses a push's bytes must not count toward the quorum: its
    core took the entries into memory, and answering the leader's next push from memory
    would acknowledge a copy the disk does not hold (a send then SEND_OK on one copy)."""
    async def run():
        drivers, leader = await start_group(tmp_path)
        try:
            f1 = await _lone_follower(drivers, leader)
            full = [True]
            f1.store.append_raw = _no_space(f1.store.append_raw, full)
            first = leader.propose_range(*append(leader.store, 1))
            # heartbeats and pushes go by (every 30 ms): none may commit the entry
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(first), 1.0)
            assert leader.node.commit < leader.log.end
            full[0] = False  # space again: the follower starts again from its disk
            await _goes_on(drivers)
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(60)
def test_a_leader_that_could_not_write_its_entry_does_not_count_itself(tmp_path):
    """The leader's own index record of an entry fails to write: the entry is not held
    on a quorum (the leader's disk lacks it; one follower of two is down), so it is not
    acknowledged. The leader halts (no write, no message, no vote) while even the cut of
    the entry's bytes is refused, starts again from its disk once there is room, and the
    group goes on."""
    async def run():
        drivers, leader = await start_group(tmp_path)
        try:
            f1 = await _lone_follower(drivers, leader)
            full = [True]
            leader.log._write_records = _no_space(leader.log._write_records, full)
            leader.store.truncate = _no_space(leader.store.truncate, full)
            fut = leader.propose_range(*append(leader.store, 1))
            done = await asyncio.wait_for(fut, 10)
            assert done.code is not Code.SUCCESS, done
            assert leader.halted and not leader.is_leader
            # the lone follower cannot be elected without the halted node's vote
            with pytest.raises(AssertionError):
                await until(lambda: any(d.is_leader for d in drivers), "a leader", 1.0)
            full[0] = False
            await _goes_on(drivers)
        finally:
            await stop_group(drivers)
    asyncio.run(run())
