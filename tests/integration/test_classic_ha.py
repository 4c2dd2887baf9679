"""Classic master/slave HA (S2) as real processes: kill -9 the SYNC_MASTER under load and
read every SEND_OK message from the slave; a SYNC_MASTER whose restart lost acknowledged
messages refills them from its slave; a slave killed, paused or cut off under load;
an ASYNC_MASTER that does not wait for its slave."""
import asyncio
import random
import signal

import pytest

from ledgermq.chaos.disk import (commitlog_dir, cut_unsynced, mark_power_loss, read_flushed,
                                 written_end)
from ledgermq.localcluster.cluster import down, restart, status, stop, up

from ..wait import wait_until
from .load import check_nothing_lost, read_all, under_load


def procs(d):
    return {p["name"]: p for p in status(d)["processes"]}


def wait_caught_up(d, timeout=15.0):
    """Until the slave's log ends where the master's does; returns where that is."""
    def caught_up():
        st = procs(d)
        m, s = st["n0"].get("ha", {}), st["n1"].get("ha", {})
        return m and s and s.get("maxOffset") == m.get("logEnd") and s.get("master") and m
    return wait_until(caught_up, lambda: f"the slave caught up: {procs(d)}", timeout)["logEnd"]


@pytest.fixture
def sync_group(tmp_path):
    d = tmp_path / "sync"
    state = up("sync", 2, d, {"syncFlushTimeout": "1000", "haHousekeepingInterval": "3000"})
    try:  # (a setup that fails must not leave the group running either)
        wait_caught_up(d)
        yield d, state
    finally:
        down(d)


def test_kill9_sync_master_every_send_ok_is_on_the_slave(sync_group):
    d, state = sync_group
    statuses: dict = {}
    acked = under_load(state["namesrv"], 4, "k", 2, (procs(d)["n0"]["pid"], signal.SIGKILL, 0),
                       statuses=statuses)
    assert len(acked) > 30, statuses
    stored = asyncio.run(read_all(state["namesrv"]))  # served by the slave now
    check_nothing_lost(acked, stored)
    assert procs(d)["n1"]["role"] == "SLAVE"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_master_that_lost_acked_messages_refills_them_from_its_slave(tmp_path, mode):
    """A power cut under ASYNC_FLUSH (or a damaged segment) takes the tail of the master's
    log, acknowledged messages included: the slave holds them. The master takes no write
    until it has them back; then nothing acknowledged is missing and the two logs agree.
    An ASYNC_MASTER too (#34, chaos async seed 6): it promises nothing when a slave takes
    over, but here nothing fails over, and it used to write on over its cut log, so that
    its slave, finding the logs forked, dropped its copy of the only good messages."""
    d = tmp_path / mode
    state = up(mode, 2, d, {"syncFlushTimeout": "1000", "haHousekeepingInterval": "3000"})
    try:
        wait_caught_up(d)
        acked = under_load(state["namesrv"], 2, "before", 0, statuses={})
        end = wait_caught_up(d)
        stop(d, "n0", signal.SIGKILL)
        cut = cut_unsynced(d / "n0" / "store", 0, random.Random(7))
        assert cut.offset < end - 1000, cut  # acknowledged messages are gone from its disk
        restart(d, "n0")
        wait_until(lambda: procs(d)["n0"].get("ha", {}).get("recovering") is False,
                   lambda: f"the master recovered: {procs(d)['n0']}")
        statuses: dict = {}
        more = under_load(state["namesrv"], 2, "after", 0, statuses=statuses)
        assert len(more) > 10, statuses  # writable again once refilled
        check_nothing_lost(acked + more, asyncio.run(read_all(state["namesrv"])))
        assert wait_caught_up(d) > end  # one log again, the new messages after the old
    finally:
        down(d)


def tear_tail(store_dir) -> tuple[int, int, int]:
    """A power loss that lost the log's last message and the last page of the one before
    it, but not that one's body: from 8 bytes before the last message's start on, zeros;
    the torn message's sizes and body CRC are intact. Returns (its end, the offset the
    zeros start at, the flushed offset the store published)."""
    log_dir = commitlog_dir(store_dir)
    flushed, end = read_flushed(log_dir), written_end(log_dir)
    seg = max(p for p in log_dir.iterdir() if p.name.isdigit() and int(p.name) < end)
    base = int(seg.name)
    with open(seg, "r+b") as f:
        starts, pos = [], max(flushed, base)
        while pos < end:  # walk the messages by their TOTALSIZE
            f.seek(pos - base)
            starts.append(pos)
            pos += int.from_bytes(f.read(4), "big")
        torn = starts[-1] - 8
        f.seek(torn - base)
        f.write(bytes(end - torn))
    mark_power_loss(store_dir)
    return starts[-1], torn, flushed


def test_sync_master_whose_power_loss_tore_a_message_refills_it_from_its_slave(tmp_path):
    """#34, chaos sync seed 5: a power loss zeroed the end of the master's last message,
    past its last fsync: the body CRC passes, so the torn message survived recovery and
    the master's log no longer agreed with its slave's. The slave refused to refill a
    log that forked from its own, the master waited for it forever, and the acknowledged
    message (the slave's copy) was never served again. Bytes past the last fsync are
    not trusted after a power loss: the master cuts them and refills from its slave."""
    d = tmp_path / "sync"
    state = up("sync", 2, d, {"syncFlushTimeout": "1000", "haHousekeepingInterval": "3000",
                              "flushIntervalCommitLog": "600000"})
    try:
        acked = under_load(state["namesrv"], 2, "before", 0, statuses={})
        end = wait_caught_up(d)
        stop(d, "n0", signal.SIGKILL)
        torn_end, torn, flushed = tear_tail(d / "n0" / "store")
        assert flushed < torn < torn_end < end, (flushed, torn, torn_end, end)
        restart(d, "n0")
        wait_until(lambda: procs(d)["n0"].get("ha", {}).get("recovering") is False,
                   lambda: f"the master recovered: {procs(d)['n0']}", timeout=20)
        statuses: dict = {}
        more = under_load(state["namesrv"], 2, "after", 0, statuses=statuses)
        assert len(more) > 10, statuses
        check_nothing_lost(acked + more, asyncio.run(read_all(state["namesrv"])))
        assert wait_caught_up(d) > end
    finally:
        down(d)


def test_slave_killed_and_restarted_under_load(sync_group):
    d, state = sync_group
    statuses: dict = {}
    acked = under_load(state["namesrv"], 3, "r", 1, (procs(d)["n1"]["pid"], signal.SIGKILL, 0),
                       statuses=statuses)
    assert statuses.get("SLAVE_NOT_AVAILABLE", 0) > 0, statuses  # said at once, not hidden
    restart(d, "n1")
    wait_caught_up(d)
    more = under_load(state["namesrv"], 1.5, "r2", 0.1, statuses={})
    assert len(more) > 10  # SEND_OK again once the slave is back
    check_nothing_lost(acked + more, asyncio.run(read_all(state["namesrv"])))


def test_paused_slave_times_out_then_is_dropped_then_catches_up(sync_group):
    d, state = sync_group
    slave = procs(d)["n1"]["pid"]
    statuses: dict = {}
    # paused longer than syncFlushTimeout (1 s) and haHousekeepingInterval (3 s)
    under_load(state["namesrv"], 6, "p", 0.5, (slave, signal.SIGSTOP, 4.5),
               (slave, signal.SIGCONT, 0), statuses=statuses)
    assert statuses.get("FLUSH_SLAVE_TIMEOUT", 0) > 0, statuses
    assert statuses.get("SLAVE_NOT_AVAILABLE", 0) > 0, statuses
    wait_caught_up(d)


def test_async_master_does_not_wait_for_its_slave(tmp_path):
    d = tmp_path / "async"
    state = up("async", 2, d)
    try:
        wait_caught_up(d)
        slave = procs(d)["n1"]["pid"]
        statuses: dict = {}
        acked = under_load(state["namesrv"], 2, "a", 0.2, (slave, signal.SIGSTOP, 1.5),
                           (slave, signal.SIGCONT, 0), statuses=statuses)
        assert set(statuses) == {"SEND_OK"} and len(acked) > 30, statuses
        end = wait_caught_up(d)
        assert end > 0
        check_nothing_lost(acked, asyncio.run(read_all(state["namesrv"])))
    finally:
        down(d)


def test_delayed_messages_are_delivered_by_the_master_only(tmp_path):
    """A slave holds the schedule topic too: were it to deliver due messages itself, its
    log would stop being a copy of the master's."""
    from ledgermq import Message, Producer
    d = tmp_path / "delay"
    state = up("sync", 2, d, {"messageDelayLevel": " ".join(["0.3s"] * 18)})
    try:
        wait_caught_up(d)

        async def send():
            async with Producer("p-delay", state["namesrv"]) as p:
                for i in range(5):
                    m = Message("Replicated", f"late-{i}".encode())
                    m.delay_level = 1
                    assert (await p.send(m)).status.value == "SEND_OK"
        asyncio.run(send())
        wait_until(lambda: sum(map(len, asyncio.run(read_all(state["namesrv"], 0)).values()))
                   >= 5, "the delayed messages delivered")
        end = wait_caught_up(d)  # and replicated
        stored = asyncio.run(read_all(state["namesrv"]))
        delivered = sorted(b for bodies in stored.values() for b in bodies)
        assert delivered == [f"late-{i}".encode() for i in range(5)]  # once each
        assert procs(d)["n1"]["ha"]["maxOffset"] == end  # the slave added nothing itself
    finally:
        down(d)


def test_sync_master_restarted_alone_after_a_crash_takes_writes_at_once(sync_group):
    """#34: both brokers killed -9, only the master restarted. Its recovery cut nothing and
    the machine did not restart (the page cache kept every byte it wrote), so no slave
    can hold anything it lacks: it takes writes at once and answers SLAVE_NOT_AVAILABLE,
    as RocketMQ's does, instead of refusing every send for as long as its slave is gone."""
    from ledgermq import Message, Producer
    d, state = sync_group
    acked = under_load(state["namesrv"], 2, "before", 0, statuses={})
    stop(d, "n1", signal.SIGKILL)
    stop(d, "n0", signal.SIGKILL)
    restart(d, "n0")

    async def send_one():
        async with Producer("alone", state["namesrv"], send_timeout=3) as p:
            return (await p.send(Message("Replicated", b"after the restart"))).status.value
    assert wait_until(lambda: asyncio.run(send_one()) == "SLAVE_NOT_AVAILABLE",
                      "the restarted master takes a write", timeout=15)
    assert procs(d)["n0"]["ha"]["recovering"] is False
    log = (d / "n0" / "server.log").read_text()
    assert "SYNC_MASTER restarted without losing anything it wrote" in log
    stored = asyncio.run(read_all(state["namesrv"]))
    check_nothing_lost(acked, stored)
    assert any(b"after the restart" in q for q in stored.values())


def test_an_operator_ends_the_refill_wait_of_a_master_whose_slave_is_gone(sync_group):
    """#34: after a power loss (its unflushed tail cut) the restarted SYNC_MASTER waits for
    its slave to refill it. With the slave gone for good that wait has no end but the
    operator's: the refusal names the command, which needs the cluster secret, and after
    it the master takes writes (acknowledged messages only the slave held are lost)."""
    import subprocess
    import sys

    from ledgermq import Message, MQClientError, Producer
    d, state = sync_group
    under_load(state["namesrv"], 1, "before", 0, statuses={})
    stop(d, "n1", signal.SIGKILL)
    stop(d, "n0", signal.SIGKILL)
    cut_unsynced(d / "n0" / "store", 0, random.Random(11))
    restart(d, "n0")

    async def send_one():
        async with Producer("alone", state["namesrv"], send_timeout=3, retry_times=0) as p:
            try:
                return (await p.send(Message("Replicated", b"after"))).status.value
            except MQClientError as e:
                return str(e)
    refusal = wait_until(lambda: "endHaRecovery" in (r := asyncio.run(send_one())) and r,
                         "the refusal names the way out", timeout=15)
    addr = f"127.0.0.1:{procs(d)['n0']['port']}"
    assert f"endHaRecovery -b {addr}" in refusal, refusal
    cmd = [sys.executable, "-m", "ledgermq", "admin", "endHaRecovery", "-b", addr]
    denied = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert denied.returncode != 0 and "cluster secret" in denied.stderr, denied.stderr
    ok = subprocess.run(cmd + ["--cluster-secret-file", state["clusterSecretFile"]],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and "recovery ended" in ok.stdout, ok.stderr
    assert wait_until(lambda: asyncio.run(send_one()) == "SLAVE_NOT_AVAILABLE",
                      "the master takes writes", timeout=15)
    assert "an operator" in (d / "n0" / "server.log").read_text()
