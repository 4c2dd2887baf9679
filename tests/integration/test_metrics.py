"""Prometheus metrics over HTTP from a real broker, read with prometheus_client's own
parser: what producers wrote and consumers read per topic, the lag a group has, the store
size; in DLedger mode one leader and the term the admin API reports, moving on after the
leader is killed."""
import asyncio
import os
import signal
import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from ledgermq import Message, Producer, PullConsumer
from ledgermq.localcluster.cluster import down, status, up

from ..wait import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple, float]:
    """(metric sample name, sorted labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float | None:
    for (n, ls), v in samples.items():
        if n == name and all((k, str(val)) in ls for k, val in labels.items()):
            return v
    return None


def test_messages_bytes_and_lag_as_a_user_sees_them(dev):
    port = free_port()
    d = dev({"metricsPort": str(port)})
    assert d.ready["metrics"] == f"http://127.0.0.1:{port}/metrics"
    bodies = [b"x" * (10 + i) for i in range(30)]

    async def main():
        async with Producer("m-p", d.namesrv) as p:
            q = (await p.queues("Metered"))[0]
            for b in bodies:
                await p.send(Message("Metered", b), q)
            await p.send_batch([Message("Metered", b"y" * 5) for _ in range(20)], q)
        async with PullConsumer("m-g", d.namesrv) as c:
            r = await c.pull(q, 0, 12)
            await c.commit(q, r.next_begin_offset)
            return len(r.messages)
    pulled = asyncio.run(main())
    m = scrape(port)
    assert value(m, "rocketmq_messages_in_total", topic="Metered") == 50
    stored_in = value(m, "rocketmq_throughput_in_total", topic="Metered")
    assert stored_in > sum(map(len, bodies)) + 100  # bodies plus their stored headers
    assert value(m, "rocketmq_messages_out_total", topic="Metered",
                 consumer_group="m-g") == pulled == 12
    assert value(m, "rocketmq_consumer_lag_messages", topic="Metered", consumer_group="m-g",
                 queue_id="0") == 50 - 12
    assert value(m, "rocketmq_storage_size") >= stored_in
    assert value(m, "ledgermq_broker_writable") == 1


def test_dledger_roles_and_terms_follow_a_failover(tmp_path):
    d = tmp_path / "dl"
    up("dledger", 3, d, {})
    try:
        st = status(d)  # `cluster up` gives every server a metrics port
        ns_port = next(p["metricsPort"] for p in st["processes"] if p["kind"] == "namesrv")
        wait_until(lambda: value(scrape(ns_port), "ledgermq_namesrv_brokers") == 3,
                   "the name server's metrics count the 3 brokers")
        mports = {p["name"]: p.get("metricsPort") for p in st["processes"] if p.get("kind") == "broker"}
        assert all(mports.values()), mports

        def leaders():
            out = {}
            for name, port in mports.items():
                try:
                    m = scrape(port)
                except OSError:
                    continue
                out[name] = (value(m, "ledgermq_raft_role", role="LEADER"),
                             value(m, "ledgermq_raft_term"))
            return out
        first = wait_until(lambda: (ls := leaders()) and sum(1 for r, _ in ls.values() if r) == 1
                           and ls, "one leader in the metrics")
        old = next(n for n, (r, _) in first.items() if r)
        old_term = first[old][1]
        admin_term = next(p["term"] for p in status(d)["processes"] if p["name"] == old)
        assert admin_term == old_term
        os.kill(next(p["pid"] for p in st["processes"] if p["name"] == old), signal.SIGKILL)
        del mports[old]
        after = wait_until(lambda: (ls := leaders()) and sum(1 for r, _ in ls.values() if r) == 1
                           and ls, "a new leader in the metrics", timeout=30)
        new = next(n for n, (r, _) in after.items() if r)
        assert new != old and after[new][1] > old_term
    finally:
        down(d)


def test_controller_mode_leader_and_sync_state_set_in_the_metrics(tmp_path):
    d = tmp_path / "ctl"
    up("controller", 3, d, {}, controllers=3)
    try:
        procs = status(d)["processes"]
        ctl = [p["metricsPort"] for p in procs if p["kind"] == "controller"]
        brokers = [p["metricsPort"] for p in procs if p.get("kind") == "broker"]
        wait_until(lambda: sum(value(scrape(p), "ledgermq_controller_is_leader") or 0
                               for p in ctl) == 1, "one controller leader in the metrics")
        assert all(value(scrape(p), "ledgermq_controller_broker_groups") is not None
                   for p in ctl)
        # the master sees the whole group in its SyncStateSet once the slaves caught up
        wait_until(lambda: any(value(m := scrape(p), "ledgermq_controller_role",
                                     role="MASTER") and
                               value(m, "ledgermq_sync_state_set_size") == 3
                               for p in brokers), "a master with a SyncStateSet of 3",
                   timeout=30)

        def master():
            for p in procs:
                if p.get("kind") == "broker":
                    try:
                        m = scrape(p["metricsPort"])
                    except OSError:
                        continue
                    if value(m, "ledgermq_controller_role", role="MASTER"):
                        return p, m
        first, m = wait_until(master, "the master's metrics")
        assert value(m, "ledgermq_became_master_total") == 1
        # its two slaves by broker id, each caught up
        wait_until(lambda: list(series(scrape(first["metricsPort"]), "ledgermq_replica_lag_bytes",
                                       "replica").values()) == [0, 0],
                   "two caught-up slaves in the master's metrics")
        leader = next(p for p in ctl if value(scrape(p), "ledgermq_controller_is_leader"))
        c = scrape(leader)
        assert value(c, "ledgermq_controller_sync_state_set_size", group="broker-a") == 3
        assert value(c, "ledgermq_controller_master_elections_total", group="broker-a") == \
            value(c, "ledgermq_controller_master_epoch", group="broker-a") == \
            value(m, "ledgermq_master_epoch")
        os.kill(first["pid"], signal.SIGKILL)  # a failover: seen by the slaves, counted
        procs = [p for p in procs if p is not first]
        second, m = wait_until(lambda: (x := master()) and x[0] is not first and x,
                               "a new master in the metrics", timeout=30)
        assert value(m, "ledgermq_master_switches_total") == 1
        assert value(m, "ledgermq_became_master_total") == 1
        wait_until(lambda: value(scrape(leader), "ledgermq_controller_master_elections_total",
                                 group="broker-a") == value(m, "ledgermq_master_epoch"),
                   "the controller counted the second election")
    finally:
        down(d)


def series(samples: dict, name: str, label: str) -> dict[str, float]:
    """{value of `label`: sample value} for every sample of `name`."""
    return {dict(ls)[label]: v for (n, ls), v in samples.items() if n == name}
