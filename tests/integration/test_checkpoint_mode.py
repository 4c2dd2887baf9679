"""Checkpoint mode (S3) as real processes: a master, two slaves and a control node. Kill -9
the master under load: a slave takes over by itself and every SEND_OK message is
consumable from it; PENDING sends resolve DONE or RESEND as the log says; the control node
keeps its cache across a crash, even one it shares with the master; the old master comes
back as a slave."""
import asyncio
import json
import os
import signal
import threading
import time

import pytest

from ledgermq import Message, Producer, SendStatus
from ledgermq.client.admin import Admin
from ledgermq.localcluster.cluster import down, restart, status, up
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from ..wait import wait_until
from .test_metrics import scrape, value
from .load import Sighting, acked_after, check_nothing_lost, read_all, under_load


def procs(d):
    return {p["name"]: p for p in status(d)["processes"]}


def single_master(d, not_name=None):
    """The one live master (other than `not_name`) as the group reports now, or None."""
    masters = [p for p in procs(d).values() if p.get("role") == "MASTER" and p["alive"]
               and p["name"] != not_name]
    return masters[0] if len(masters) == 1 else None


def wait_for_master(d, not_name=None, timeout=20.0):
    return wait_until(lambda: single_master(d, not_name), lambda: f"a single master: {procs(d)}",
                      timeout)


def wait_slave_caught_up(d, name, timeout=20.0):
    def caught_up():
        st = procs(d)
        master = next((p for p in st.values() if p.get("role") == "MASTER"), None)
        me = st[name]
        return master and me.get("role") == "SLAVE" and \
            me.get("ha", {}).get("maxOffset") == master["ha"]["logEnd"] and me
    return wait_until(caught_up, lambda: f"{name} caught up as a slave: {procs(d)}", timeout)


def wait_topic_copied(d, names, topic="Replicated", timeout=20.0):
    """Each of `names` holds `topic`'s config as the master has it: slaves copy configs
    every slaveSyncInterval (2 s), and one frozen before that and then made master knows
    the topic only from its log, with as many queues as the log shows."""
    async def configs(port):
        client = RemotingClient()
        try:
            r = await client.invoke(f"127.0.0.1:{port}", RemotingCommand(
                RequestCode.GET_ALL_TOPIC_CONFIG), 3.0)
            return json.loads(r.body)["topicConfigTable"].get(topic)
        finally:
            await client.close()

    def copied():
        st = procs(d)
        master = next(p for p in st.values() if p.get("role") == "MASTER")
        want = asyncio.run(configs(master["port"]))
        return want and all(asyncio.run(configs(st[n]["port"])) == want for n in names)
    wait_until(copied, f"{names} hold the master's config of {topic}", timeout)


def ha_links(namesrv, port) -> list:
    """The slave links the HA master on `port` serves, asked of it alone (a frozen
    process would hold up `status`)."""
    async def go():
        async with Admin(namesrv) as a:
            return json.loads((await a.broker_status(f"127.0.0.1:{port}"))["ha"])["slaves"]
    return asyncio.run(go())


@pytest.fixture
def group(tmp_path):
    d = tmp_path / "cp"
    # (a generous resolve window: the tests freeze and thaw processes inside it)
    state = up("checkpoint", 3, d, {"checkpointSyncTimeoutMillis": "500",
                                    "checkpointResolveWithinMillis": "6000"})
    try:  # (a setup that fails must not leave the group running either)
        wait_for_master(d)
        for name in ("n1", "n2"):
            wait_slave_caught_up(d, name)
        yield d, state
    finally:
        down(d)


def test_kill9_master_fails_over_by_itself_and_loses_nothing(group):
    d, state = group
    old = wait_for_master(d)
    statuses: dict = {}
    with Sighting(lambda: single_master(d, not_name=old["name"]), "a new master") as seen:
        acked = under_load(state["namesrv"], 7, "f", 2, (old["pid"], signal.SIGKILL, 0),
                           statuses=statuses)
    new = wait_for_master(d, not_name=old["name"])
    assert len(acked) > 50, statuses
    check_nothing_lost(acked, asyncio.run(read_all(state["namesrv"])))
    after = acked_after(acked, seen.wait())
    assert after, f"no SEND_OK after the new master was seen: {statuses}"
    restart(d, old["name"])  # it rolls back past the takeover and rejoins as a slave
    wait_slave_caught_up(d, old["name"])
    assert wait_for_master(d)["name"] == new["name"]


async def _pending_sends(ns, n, prefix):
    """n sends made while the checkpoint cannot move and the control node is frozen."""
    async with Producer("pend-" + prefix, ns, resolve_pending=False, send_timeout=10) as p:
        return await asyncio.gather(*(p.send(Message("Replicated", f"{prefix}-{i}".encode()))
                                      for i in range(n))), p


def _freeze(*pids):
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def _thaw(*pids):
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


async def _resolve_all(ns, results):
    async with Producer("resolver", ns) as p:
        return [await p.resolve(r, timeout=20) for r in results]


def test_pending_resolves_done_when_the_master_survives(group):
    """The control node is frozen, so a timed-out sync cannot be cached: PENDING. The
    master lives on, the checkpoint catches up: DONE."""
    d, state = group
    st = procs(d)
    frozen = [st["n1"]["pid"], st["n2"]["pid"], st["control"]["pid"]]
    _freeze(*frozen)
    try:
        results, _ = asyncio.run(_pending_sends(state["namesrv"], 3, "d"))
    finally:
        _thaw(*frozen)
    assert [r.status for r in results] == [SendStatus.PENDING] * 3
    m = scrape(single_master(d)["metricsPort"])  # counted, and timed as what they were
    assert value(m, "ledgermq_checkpoint_pending_sends_total") == 3
    assert value(m, "rocketmq_rpc_latency_count", response_code="send_pending") == 3
    assert asyncio.run(_resolve_all(state["namesrv"], results)) == ["DONE"] * 3
    # consumers see a send once the group keeps it (checkpoint_reads.py): the checkpoint
    # that covers it may land just after the resolution (a CI run under load read before)
    wait_until(lambda: {b"d-0", b"d-1", b"d-2"} <= _readable(state["namesrv"]),
               "the resolved sends readable")


def _readable(ns) -> set:
    return {b for q in asyncio.run(read_all(ns)).values() for b in q}


def test_consumers_read_no_send_a_failover_could_take_back(group):
    """A PENDING send is on the master alone: neither covered by the checkpoint nor cached
    by the control node, a failover now would roll it back (S3-6). Consumers read it at
    once before; one that did then held an offset past the new master's queue, and was
    sent back to the queue's start (the chaos run of checkpoint seed 1: 13,003 messages
    read twice). Now it is readable once the checkpoint covers it."""
    d, state = group
    ns = state["namesrv"]
    st = procs(d)
    frozen = [st["n1"]["pid"], st["n2"]["pid"], st["control"]["pid"]]
    _freeze(*frozen)
    try:
        results, _ = asyncio.run(_pending_sends(ns, 2, "u"))
        assert [r.status for r in results] == [SendStatus.PENDING] * 2
        assert not {b"u-0", b"u-1"} & _readable(ns)
    finally:
        _thaw(*frozen)
    wait_until(lambda: {b"u-0", b"u-1"} <= _readable(ns), "the sends readable once covered")


class InBackground(threading.Thread):
    """`fn()` run in a thread; `result()` its value once done."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.value = fn, None
        self.start()

    def run(self):
        self.value = self.fn()

    def result(self, timeout=30):
        self.join(timeout)
        assert not self.is_alive(), "still running"
        return self.value


def _raw_send(addr, body, language):
    """A SEND_MESSAGE_V2 as a client of `language` sends it (RocketMQ's request header)."""
    async def go():
        client = RemotingClient()
        try:
            cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, language=language, ext={
                "a": "raw", "b": "Replicated", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                "g": str(int(time.time() * 1000)), "h": "0", "i": "WAIT\x01true\x02",
                "j": "0", "k": "false", "m": "false"}, body=body)
            return await client.invoke(addr, cmd, 10.0)
        finally:
            await client.close()
    return asyncio.run(go())


def test_clients_that_know_no_pending_get_flush_slave_timeout(group):
    """RocketMQ's own clients do not know SEND_PENDING (an unknown code is an error, which
    some of them resend). While the control node cannot tell (frozen throughout) they get
    FLUSH_SLAVE_TIMEOUT, RocketMQ's status for "stored on the master, not confirmed by a
    slave"; ledgermq's client gets SEND_PENDING."""
    d, state = group
    st = procs(d)
    master = f"127.0.0.1:{st['n0']['port']}"
    frozen = [st["n1"]["pid"], st["n2"]["pid"], st["control"]["pid"]]
    _freeze(*frozen)
    try:  # (together: each stock client's send is held for the whole resolve window)
        sends = [InBackground(lambda lang=lang, body=body: _raw_send(master, body, lang))
                 for lang, body in (("JAVA", b"from-java"), ("CPP", b"from-cpp"),
                                    ("PYTHON", b"from-ledgermq"))]
        java, cpp, ours = (s.result() for s in sends)
    finally:
        _thaw(*frozen)
    assert java.code == cpp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (java, cpp)
    assert "pending" in java.remark and java.ext["msgId"]
    assert ours.code == ResponseCode.SEND_PENDING

    def stored():  # each stored once, visible once the slaves are back
        bodies = [b for q in asyncio.run(read_all(state["namesrv"])).values() for b in q]
        return len(bodies) >= 3 and bodies
    bodies = wait_until(stored, "the three sends visible")
    assert sorted(bodies) == [b"from-cpp", b"from-java", b"from-ledgermq"]


def test_pending_resolves_resend_when_the_master_died_with_it(group):
    """PENDING sends that only the master held (slaves cut off, control node down), and
    the master died: RESEND, and indeed the new master does not have them."""
    d, state = group
    st = procs(d)
    master = wait_for_master(d)
    under_load(state["namesrv"], 0.3, "w", 0)  # the topic exists on every broker
    for name in ("n1", "n2"):
        wait_slave_caught_up(d, name)
    slaves = [st[n]["pid"] for n in ("n0", "n1", "n2") if n != master["name"]]
    wait_topic_copied(d, [n for n in ("n0", "n1", "n2") if n != master["name"]])
    _freeze(*slaves)
    try:
        # frozen slaves' sockets would still take bytes in: wait until the master has
        # dropped them (haHousekeepingInterval), so nothing reaches them from here on
        wait_until(lambda: ha_links(state["namesrv"], master["port"]) == [],
                   "the master dropped its frozen slaves")
        os.kill(st["control"]["pid"], signal.SIGKILL)
        results, _ = asyncio.run(_pending_sends(state["namesrv"], 3, "r"))
        os.kill(master["pid"], signal.SIGKILL)  # the only copy dies
    finally:
        _thaw(*slaves)
    assert [r.status for r in results] == [SendStatus.PENDING] * 3
    restart(d, "control")
    wait_for_master(d, not_name=master["name"])
    assert asyncio.run(_resolve_all(state["namesrv"], results)) == ["RESEND"] * 3
    bodies = {b for q in asyncio.run(read_all(state["namesrv"])).values() for b in q}
    assert not {b"r-0", b"r-1", b"r-2"} & bodies


def saved_members(control: dict, group: str = "broker-a") -> list[int]:
    """The member slots the serving control node `control` has saved for `group`."""
    async def ask() -> list[int]:
        client = RemotingClient()
        try:
            r = await client.invoke(f"{control['host']}:{control['port']}", RemotingCommand(
                RequestCode.CONTROL_STATUS), 2.0)
            return json.loads(r.body).get(group, {}).get("members", []) \
                if r.code == ResponseCode.SUCCESS else []
        finally:
            await client.close()
    return asyncio.run(ask())


def cached_then_killed(d, state, control: dict) -> dict:
    """Five sends acknowledged only through the control node's cache (the slaves frozen,
    so the checkpoint stalls), then `control` and the master killed together; the master.
    Only slaves the control node saved as members may be promoted: until the master's
    heartbeat has named both (a moment after they caught up), a master killed leaves none
    eligible, so the test waits for that first."""
    wait_until(lambda: len(saved_members(control)) == 2,
               lambda: f"both slaves saved as members: {saved_members(control)}")
    st = procs(d)
    master = wait_for_master(d)
    slaves = [st[n]["pid"] for n in ("n0", "n1", "n2") if n != master["name"]]
    _freeze(*slaves)

    async def send():
        async with Producer("cached", state["namesrv"], send_timeout=10) as p:
            return await asyncio.gather(*(p.send(Message("Replicated", f"c-{i}".encode()))
                                          for i in range(5)))
    try:
        results = asyncio.run(send())
        assert [r.status for r in results] == [SendStatus.SEND_OK] * 5
        os.kill(control["pid"], signal.SIGKILL)
        os.kill(master["pid"], signal.SIGKILL)
    finally:
        _thaw(*slaves)
    return master


def test_cached_sends_survive_master_and_control_node_dying_together(group):
    d, state = group
    master = cached_then_killed(d, state, procs(d)["control"])
    restart(d, "control")  # its cache comes back from disk; the failover happens then
    wait_for_master(d, not_name=master["name"])
    bodies = {b for q in asyncio.run(read_all(state["namesrv"])).values() for b in q}
    assert {f"c-{i}".encode() for i in range(5)} <= bodies


MEMBER_TIMEOUT_MS = 3000


async def _timed_sends(ns, n, prefix):
    """n sync sends one after another: (statuses, seconds taken)."""
    async with Producer("pace-" + prefix, ns, send_timeout=10) as p:
        started = time.monotonic()
        results = [await p.send(Message("Replicated", f"{prefix}-{i}".encode()))
                   for i in range(n)]
        return [r.status for r in results], time.monotonic() - started


def _members(d) -> dict:
    master = next(p for p in procs(d).values() if p.get("role") == "MASTER" and p["alive"])
    return master["ha"]["members"]


def test_a_slave_lost_for_good_stops_holding_sends_back(tmp_path):
    """One member slave killed -9 and never restarted: once checkpointMemberTimeout has
    passed, the master drops it (after the control node saved that) and sync sends are
    SEND_OK at their usual pace again, not each after checkpointSyncTimeoutMillis through
    the control node's cache. Restarted, the slave becomes a member again."""
    d = tmp_path / "cp"
    state = up("checkpoint", 3, d, {"checkpointSyncTimeoutMillis": "1000",
                                    "checkpointMemberTimeout": str(MEMBER_TIMEOUT_MS)})
    try:
        master = wait_for_master(d)
        for name in ("n1", "n2"):
            wait_slave_caught_up(d, name)
        wait_until(lambda: len(_members(d)) == 2, lambda: f"two members: {_members(d)}")
        ns = state["namesrv"]
        statuses, took = asyncio.run(_timed_sends(ns, 20, "before"))
        assert statuses == [SendStatus.SEND_OK] * 20
        usual = took / 20
        lost = next(n for n in ("n0", "n1", "n2") if n != master["name"])
        os.kill(procs(d)[lost]["pid"], signal.SIGKILL)
        killed_at = time.monotonic()

        def quick_send():  # one send answered well within the sync timeout
            statuses, took = asyncio.run(_timed_sends(ns, 1, "probe"))
            return statuses == [SendStatus.SEND_OK] and took < 0.5
        wait_until(quick_send, "a send acknowledged without waiting the sync timeout",
                   timeout=30)
        assert time.monotonic() - killed_at >= MEMBER_TIMEOUT_MS / 1000 * 0.9
        statuses, took = asyncio.run(_timed_sends(ns, 50, "after"))
        assert statuses == [SendStatus.SEND_OK] * 50
        assert took < 50 * max(usual * 3, 0.1), (took, usual)  # the usual pace, not 1 s each
        assert len(_members(d)) == 1
        restart(d, lost)
        wait_until(lambda: len(_members(d)) == 2, lambda: f"{lost} a member again: "
                   f"{_members(d)}", timeout=30)
    finally:
        down(d)


def _control_state(d) -> dict:
    """broker-a's state as the control node keeps it (epoch, master, takeovers)."""
    # (from cluster.json: `status` would wait on a frozen broker)
    processes = json.loads((d / "cluster.json").read_text())["processes"]
    control = next(p for p in processes if p["name"] == "control")

    async def go():
        client = RemotingClient()
        try:
            r = await client.invoke(f"127.0.0.1:{control['port']}",
                                    RemotingCommand(RequestCode.CONTROL_STATUS), 3.0)
            return json.loads(r.body)["broker-a"]
        finally:
            await client.close()
    return asyncio.run(go())


def _held_stock_send(master, body):
    """A Java client's send to `master`, returned once the master holds it pending
    (neither covered by the checkpoint nor cached: the caller stopped who could)."""
    pending = lambda: value(scrape(master["metricsPort"]),  # noqa: E731
                            "ledgermq_checkpoint_pending_sends_total")
    before = pending()
    send = InBackground(lambda: _raw_send(f"127.0.0.1:{master['port']}", body, "JAVA"))
    wait_until(lambda: pending() == before + 1, "the master holds the send pending")
    return send


def test_a_stock_clients_pending_send_is_resolved_by_the_broker_done(group):
    """#34: a RocketMQ client cannot resolve PENDING, so the broker does while the client
    waits. The control node is back within the window and the checkpoint covers the send:
    SEND_OK, where the old code answered FLUSH_SLAVE_TIMEOUT (neither lost nor kept)."""
    d, state = group
    st = procs(d)
    master = wait_for_master(d)
    frozen = [st[n]["pid"] for n in ("n0", "n1", "n2", "control") if n != master["name"]]
    _freeze(*frozen)
    try:
        send = _held_stock_send(master, b"held-done")
    finally:
        _thaw(*frozen)
    r = send.result()
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    assert r.ext["msgId"]
    bodies = {b for q in asyncio.run(read_all(state["namesrv"])).values() for b in q}
    assert b"held-done" in bodies
    assert value(scrape(master["metricsPort"]), "ledgermq_checkpoint_resolved_by_broker_total",
                 resolution="DONE") == 1


def test_a_stock_clients_pending_send_lost_to_a_takeover_is_refused_for_a_resend(group):
    """The master holding a stock client's PENDING send (slaves stopped, control node
    down) stops; the control node, back, makes a slave master, whose log lacks the send. The old master, woken within the window, learns
    RESEND from the control node: the client gets a refusal it retries, not an answer that
    leaves it guessing, and the message is indeed in no queue."""
    d, state = group
    st = procs(d)
    master = wait_for_master(d)
    under_load(state["namesrv"], 0.3, "w", 0)  # the topic exists on every broker
    for name in ("n0", "n1", "n2"):
        if name != master["name"]:
            wait_slave_caught_up(d, name)
    slaves = [st[n]["pid"] for n in ("n0", "n1", "n2") if n != master["name"]]
    wait_topic_copied(d, [n for n in ("n0", "n1", "n2") if n != master["name"]])
    epoch = _control_state(d)["epoch"]
    _freeze(*slaves)
    try:
        # nothing reaches the slaves (frozen ones' sockets would still take the send in,
        # and a slave taking over would then have it: DONE), nor the control node (a frozen
        # one would cache the send once thawed, and keep it: DONE too)
        wait_until(lambda: ha_links(state["namesrv"], master["port"]) == [],
                   "the master dropped its frozen slaves")
        os.kill(st["control"]["pid"], signal.SIGKILL)
        send = _held_stock_send(master, b"held-resend")
        _freeze(master["pid"])
        _thaw(*slaves)
        restart(d, "control")
        wait_until(lambda: _control_state(d)["epoch"] > epoch, "a slave taking over")
    finally:
        _thaw(*slaves, master["pid"])
    r = send.result()
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
    assert "another master took over" in r.remark
    wait_for_master(d, not_name=master["name"])
    bodies = {b for q in asyncio.run(read_all(state["namesrv"])).values() for b in q}
    assert b"held-resend" not in bodies


def _route_samples(namesrv: str, old_master: str, started: threading.Event,
                   timeout: float = 20.0) -> list:
    """The groups' broker addresses in the route of "Replicated", as every name server
    answers, sampled back to back until one names a master other than `old_master`."""
    async def go():
        client = RemotingClient()
        samples: list = []
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for ns in namesrv.split(";"):
                    r = await client.invoke(ns, RemotingCommand(
                        RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": "Replicated"}), 3.0)
                    doc = json.loads(r.body) if r.code == ResponseCode.SUCCESS else {}
                    addrs = {bd["brokerName"]: bd["brokerAddrs"]
                             for bd in doc.get("brokerDatas", ())}
                    samples.append(addrs)
                    started.set()
                    if addrs.get("broker-a", {}).get("0") not in (None, old_master):
                        return samples
            raise AssertionError(f"no new master in the route: {samples[-3:]}")
        finally:
            await client.close()
    return asyncio.run(go())


def test_a_failover_never_takes_the_group_out_of_the_route(group):
    """A promoted slave moves itself to id 0 in one registration. It used to unregister
    first: for a moment the group had no route at all, and a producer that fetched the
    route then left the group's queues unused until its 30 s route refresh (the chaos
    runs' kill-master windows: 4.9 s until the group acknowledged again)."""
    d, state = group
    under_load(state["namesrv"], 0.3, "w", 0)  # the topic on every broker, with messages
    master = wait_for_master(d)
    for name in ("n0", "n1", "n2"):
        if name != master["name"]:
            wait_slave_caught_up(d, name)
    wait_topic_copied(d, [n for n in ("n0", "n1", "n2") if n != master["name"]])
    started = threading.Event()
    sampler = InBackground(lambda: _route_samples(
        state["namesrv"], f"127.0.0.1:{master['port']}", started))
    assert started.wait(10)
    os.kill(master["pid"], signal.SIGKILL)
    samples = sampler.result()
    gaps = [s for s in samples if "broker-a" not in s]
    assert not gaps, f"{len(gaps)} of {len(samples)} route answers without the group"
