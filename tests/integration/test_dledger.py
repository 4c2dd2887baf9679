"""A 3-replica DLedger group as real processes: kill -9 or freeze the leader under
continuous sends; nothing acknowledged is lost, and the old leader rejoins."""
import asyncio
import itertools
import os
import signal
import time

import pytest

from ledgermq import Message, Producer, PushConsumer
from ledgermq.client.instance import MQClientError
from ledgermq.localcluster.cluster import down, restart, status, up
from ledgermq.remoting import RemotingError

from ..wait import until, wait_until
from .load import Sighting, acked_after, check_nothing_lost, read_all, under_load


@pytest.fixture
def group(tmp_path):
    d = tmp_path / "group"
    state = up("dledger", 3, d)
    yield d, state
    down(d)


def single_leader(d, not_name=None):
    """The one live leader (other than `not_name`) as the group reports now, or None."""
    leaders = [p for p in status(d)["processes"] if p.get("role") == "LEADER" and p["alive"]
               and p["name"] != not_name]
    return leaders[0] if len(leaders) == 1 else None


def leader_of(d, timeout=15.0, not_name=None):
    return wait_until(lambda: single_leader(d, not_name),
                      lambda: f"a single leader: {status(d)['processes']}", timeout)


def procs(d):
    return {p["name"]: p for p in status(d)["processes"]}


def test_kill9_leader_under_load_loses_nothing(group):
    d, state = group
    ns = state["namesrv"]
    first = leader_of(d)
    with Sighting(lambda: single_leader(d, not_name=first["name"]), "a new leader") as seen:
        acked = under_load(ns, 6, "a", 2, (first["pid"], signal.SIGKILL, 0))
    second = leader_of(d, not_name=first["name"])
    assert second["term"] > first["term"]
    assert len(acked) > 50
    # the new leader acknowledges sends: some came after it was seen leading
    after = acked_after(acked, seen.wait())
    assert after, f"no SEND_OK after the new leader was seen ({len(acked)} before it)"
    stored = asyncio.run(read_all(ns))
    check_nothing_lost(acked, stored)
    # the old leader comes back as a follower and catches up
    restart(d, first["name"])
    wait_until(lambda: (st := procs(d))[first["name"]].get("role") == "FOLLOWER" and
               st[first["name"]].get("commit") == st[second["name"]].get("commit"),
               "the old leader follows at the leader's commit index", 15)
    st = procs(d)
    assert st[first["name"]]["role"] == "FOLLOWER"
    assert st[first["name"]]["commit"] == st[second["name"]]["commit"]
    assert st[first["name"]]["end"] == st[second["name"]]["end"]


def test_frozen_leader_does_not_split_the_brain(group):
    d, state = group
    ns = state["namesrv"]
    first = leader_of(d)
    # frozen for longer than the election timeout, then thawed
    acked = under_load(ns, 7, "s", 1.5, (first["pid"], signal.SIGSTOP, 3),
                       (first["pid"], signal.SIGCONT, 0))

    def settled():  # the thawed leader learnt the group's term
        st = status(d)["processes"]
        return len([p for p in st if p.get("role") == "LEADER"]) == 1 and \
            len({p["term"] for p in st if "term" in p}) == 1 and st
    st = wait_until(settled, "one leader, one term", 15)
    leaders = [p for p in st if p.get("role") == "LEADER"]
    assert len(leaders) == 1  # the frozen one stepped down or won again: never two
    terms = {p["name"]: p["term"] for p in st if "term" in p}
    assert len(set(terms.values())) == 1  # everyone agrees on the term
    check_nothing_lost(acked, asyncio.run(read_all(ns)))


def test_sends_waiting_on_a_frozen_leader_move_to_the_new_one_before_their_timeout(group):
    """A paused leader answers nothing and resets nothing: the send waiting on it used to
    wait out its whole timeout before it was retried on the new leader (the chaos runs'
    pause windows: 3.0-3.3 s with a 3 s timeout). The client now asks for the route once
    the master has owed an answer for 1 s, and finding another master there, drops the
    connection: the send is retried on the new leader well before its 6 s timeout."""
    d, state = group
    first = leader_of(d)
    acked = under_load(state["namesrv"], 9, "z", 1.5, (first["pid"], signal.SIGSTOP, 6.5),
                       (first["pid"], signal.SIGCONT, 0), send_timeout=6.0)
    gaps = [b.at - a.at for a, b in zip(acked, acked[1:])]
    assert acked and acked[-1].at - acked[0].at > 7, "the sends stopped at the pause"
    assert max(gaps) < 3.5, f"no SEND_OK for {max(gaps):.1f} s around the pause"
    check_nothing_lost(acked, asyncio.run(read_all(state["namesrv"])))


def test_a_consumer_reads_from_the_new_leader_soon_after_the_old_one_froze(group):
    """A paused leader answers nothing and resets nothing: a consumer's long polls waited
    on it until their timeout (suspend + 5 s, 20 s by default) and its route was fetched
    again every 20 s, so the consumer read nothing for up to 20 s after the failover (the
    chaos runs' pause windows: 4-13 s with a 2 s suspend). The new leader now tells the
    consumers connected to it; they fetch the route and leave the old leader's polls."""
    d, state = group
    ns = state["namesrv"]
    first = leader_of(d)
    reads: dict[bytes, float] = {}  # body -> when the listener had it

    def listener(msgs):
        for m in msgs:
            reads.setdefault(m.body, time.monotonic())

    async def scenario():
        c = PushConsumer("after-freeze", ns, consume_from="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("Replicated")
        c.register_listener(listener)
        async with Producer("p-after-freeze", ns, send_timeout=6.0) as p:
            await p.send(Message("Replicated", b"before"))  # the topic exists from here
            await c.start()
            try:
                await until(lambda: b"before" in reads, "the consumer reads", timeout=20)
                os.kill(first["pid"], signal.SIGSTOP)
                frozen_at = time.monotonic()
                try:
                    for i in itertools.count():  # until one sent after the freeze is read
                        if any(b.startswith(b"after-") for b in reads) or \
                                time.monotonic() > frozen_at + 15:
                            break
                        try:
                            await p.send(Message("Replicated", b"after-%d" % i))
                        except (MQClientError, RemotingError):
                            pass
                        await asyncio.sleep(0.05)  # pacing: 20 sends a second, not a wait
                finally:
                    os.kill(first["pid"], signal.SIGCONT)
            finally:
                await c.shutdown()
        return frozen_at
    frozen_at = asyncio.run(scenario())
    after = [t for b, t in reads.items() if b.startswith(b"after-")]
    assert after, "nothing sent after the freeze was read within 15 s"
    # the election takes ~1 s; a consumer that waits out its poll takes 20
    assert min(after) - frozen_at < 6.0, f"first read {min(after) - frozen_at:.1f} s after"


def test_retries_are_delivered_in_dledger_mode(tmp_path):
    """Failed messages go back through %RETRY% via the (replicated) delay queue."""
    from ledgermq import ConsumeStatus, PushConsumer
    d = tmp_path / "g"
    state = up("dledger", 3, d, {"messageDelayLevel": " ".join(["0.2s"] * 18)})
    try:
        leader_of(d)
        seen: list[int] = []

        async def main():
            async def listener(msgs):
                seen.extend(m.reconsume_times for m in msgs)
                return ConsumeStatus.RECONSUME_LATER if len(seen) < 2 else \
                    ConsumeStatus.CONSUME_SUCCESS
            async with Producer("p", state["namesrv"]) as p:
                await p.send(Message("RetryRaft", b"create"))
                c = PushConsumer("rr", state["namesrv"], pull_suspend_ms=300,
                                 consume_from="CONSUME_FROM_LAST_OFFSET")
                c.subscribe("RetryRaft")
                c.register_listener(listener)
                await c.start()
                # a new group reads a queue that still starts at 0 from there, even from
                # the last offset: "create" is the message delivered, failed and retried
                await until(lambda: len(seen) >= 2, "a delivery and its retry")
                await c.shutdown()
        asyncio.run(main())
        assert seen[:2] == [0, 1]  # first delivery, then the retry
    finally:
        down(d)


@pytest.mark.slow  # (make test-slow: the default run keeps near 15 minutes)
def test_leadership_moves_to_the_preferred_leader_and_back(tmp_path):
    """preferredLeaderId: the group hands leadership to n2 once it caught up; when n2 dies
    another node leads; when n2 is back and caught up it leads again. Nothing acked lost."""
    d = tmp_path / "preferred"
    state = up("dledger", 3, d, {"preferredLeaderId": "n2"})
    try:
        wait_until(lambda: (single_leader(d) or {}).get("name") == "n2", "n2 leads", 20)
        first = leader_of(d)
        assert first["name"] == "n2"
        acked = under_load(state["namesrv"], 4, "p", 1, (first["pid"], signal.SIGKILL, 0))
        assert leader_of(d, not_name="n2")["name"] != "n2"
        restart(d, "n2")
        more = under_load(state["namesrv"], 4, "q", 0.5)
        wait_until(lambda: (single_leader(d) or {}).get("name") == "n2", "n2 leads again", 20)
        assert leader_of(d)["name"] == "n2"
        check_nothing_lost(acked + more, asyncio.run(read_all(state["namesrv"])))
    finally:
        down(d)


def test_a_follower_far_behind_catches_up_with_large_entries(group):
    """A follower down while ~80 MB arrive in large batches, then a new leader: the new
    leader's pushes to it are bounded in bytes (not only in entries), so they fit a frame
    and it catches up."""
    d, state = group
    old_leader = leader_of(d)
    was = procs(d)
    follower = next(n for n, p in was.items() if p.get("role") == "FOLLOWER")
    os.kill(was[follower]["pid"], signal.SIGKILL)

    async def load():
        async with Producer("big", state["namesrv"], send_timeout=30) as p:
            batch = [Message("Big", os.urandom(2000)) for _ in range(500)]  # ~1 MB each
            for _ in range(40):
                await asyncio.gather(*(p.send_batch(batch) for _ in range(2)))
    asyncio.run(load())
    os.kill(old_leader["pid"], signal.SIGKILL)  # the next leader meets the follower afresh
    restart(d, follower)
    restart(d, old_leader["name"])

    def same_log():
        st = {n: p for n, p in procs(d).items() if n != "namesrv"}
        ends = {p.get("end") for p in st.values()}
        return len(ends) == 1 and None not in ends and \
            len({p.get("commit") for p in st.values()}) == 1
    wait_until(same_log, lambda: f"every replica holds the same log: {procs(d)}", 60,
               interval=0.5)


def test_a_follower_that_lost_its_data_directory_gets_the_whole_log_back(group):
    """kill -9 a follower, delete its store (commit log, raft index, meta), restart it:
    it rejoins empty, the leader compares, truncates and refills it."""
    import shutil
    d, state = group
    acked = under_load(state["namesrv"], 4, "w", 1.0)
    leader = leader_of(d)
    was = procs(d)
    follower = next(n for n, p in was.items() if p.get("role") == "FOLLOWER")
    os.kill(was[follower]["pid"], signal.SIGKILL)
    wait_until(lambda: not procs(d)[follower]["alive"], f"{follower} is gone", 10)
    shutil.rmtree(d / follower / "store")
    restart(d, follower)
    wait_until(lambda: (st := procs(d))[follower].get("end") == st[leader["name"]].get("end")
               and st[follower].get("commit") == st[leader["name"]].get("commit"),
               f"{follower} refilled", 30)
    st = procs(d)
    assert st[follower].get("end") == st[leader["name"]].get("end"), st
    # it serves what it got: read everything from the refilled follower alone
    os.kill(st[leader["name"]]["pid"], signal.SIGKILL)
    leader_of(d, not_name=leader["name"])
    check_nothing_lost(acked, asyncio.run(read_all(state["namesrv"])))


async def _update_config(addr: str, text: str):
    """RocketMQ's UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig) to one broker."""
    from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand(
            RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()), 5.0)
    finally:
        await client.close()


@pytest.mark.parametrize("selector", [False, True], ids=["any-queue", "selector"])
def test_an_operator_moves_leadership_with_update_broker_config(group, selector):
    """#34: producers cut from a leader that keeps its peers wait, as with RocketMQ (no
    election: the leader is alive). The operator's way out, without a restart:
    `mqadmin updateBrokerConfig -k preferredLeaderId -v nX` on the group's brokers, and the
    leader hands over once nX holds the whole log. A wrong id is refused, naming the ids.
    A producer running throughout, which created its topic by sending (so it also holds the
    route of TBW102, fetched before the hand-over), sends to the new leader within seconds:
    it used to take the master from the first route it had, and sent to the old leader
    until its 30 s route refresh. A send whose queue a selector chose is not retried, but
    the old leader's refusal has the next send ask for the route again: it used to wait for
    the 30 s refresh (a DLedger leader deposed by a partition in a chaos run: 14 s of
    refusals)."""
    from ledgermq.remoting import ResponseCode
    d, state = group
    old = leader_of(d)
    target = next(n for n, p in procs(d).items()
                  if p.get("role") == "FOLLOWER" and p["alive"])
    addrs = [f"127.0.0.1:{p['port']}" for p in procs(d).values() if "replPort" in p]
    new_addr = f"127.0.0.1:{procs(d)[target]['port']}"

    async def scenario():
        async with Producer("mover", state["namesrv"]) as p:
            await p.send(Message("MovedTopic", b"created by a send"))
            await p.send(Message("MovedTopic", b"its route fetched and held"))
            wrong = await _update_config(addrs[0], "preferredLeaderId=n9\n")
            assert wrong.code == ResponseCode.SYSTEM_ERROR and \
                "not one of the dLegerPeers" in wrong.remark, wrong.remark
            for addr in addrs:
                r = await _update_config(addr, f"preferredLeaderId={target}\n")
                assert r.code == ResponseCode.SUCCESS, r.remark
            await until(lambda: asyncio.to_thread(
                lambda: (single_leader(d) or {}).get("name") == target), f"{target} leads", 20)
            moved = time.monotonic()
            for i in itertools.count():
                if time.monotonic() - moved > 40:
                    break
                try:
                    r = await p.send(Message("MovedTopic", b"after"), **(
                        {"selector": lambda qs, m, a: qs[a % len(qs)], "arg": i}
                        if selector else {}))
                except MQClientError:  # the old leader's "not the leader", until rerouted
                    continue
                if p.instance.master_addr(r.queue.broker_name) == new_addr:
                    return time.monotonic() - moved
            raise AssertionError("the producer never reached the new leader")
    took = asyncio.run(scenario())
    assert took < 5, f"{took:.1f} s after the hand-over"
    assert leader_of(d)["name"] != old["name"]
