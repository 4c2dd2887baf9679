"""Prometheus metrics that need time or replicas to mean anything, read from real processes:
request-latency and message-size histograms counting what was sent, the store's flushes; a
paused slave's lag in bytes (exactly what was written since) and seconds, and the send
latency that waited for it; a DLedger leader's lag per follower; the control node's own
endpoint agreeing with the master on the checkpoint, and counting the sends it cached."""
import asyncio
import os
import signal
from contextlib import contextmanager

from ledgermq import Message, Producer, PullConsumer, SendStatus
from ledgermq.localcluster.cluster import down, status, up

from ..wait import wait_until
from .test_grpc_endpoint import message as grpc_message, pb, send as grpc_send
from .test_metrics import free_port, scrape, series, value


def total(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all((k, str(x)) in ls for k, x in labels.items()))


def send_all(namesrv: str, topic: str, singles: list[bytes], batch: list[bytes] = ()):
    """Each single as its own request, then `batch` as one; the statuses."""
    async def main():
        async with Producer("mr-p", namesrv) as p:
            q = (await p.queues(topic))[0]
            out = [(await p.send(Message(topic, b), q)).status for b in singles]
            if batch:
                out.append((await p.send_batch([Message(topic, b) for b in batch], q)).status)
            return out
    return asyncio.run(main())


@contextmanager
def paused(pid: int):
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def procs(d):
    return {p["name"]: p for p in status(d)["processes"]}


def test_latency_and_size_histograms_count_requests_and_messages(dev):
    port = free_port()
    d = dev({"metricsPort": str(port), "flushIntervalCommitLog": "50", "grpcServerPort": "0"})
    singles = [b"s" * 100] * 7 + [b"L" * 5000]
    assert send_all(d.namesrv, "Timed", singles, [b"b" * 200] * 10) == [SendStatus.SEND_OK] * 9
    # a RocketMQ 5 client's two messages: two sends, timed as gRPC's
    r = grpc_send(d, grpc_message("Timed", b"g" * 100), grpc_message("Timed", b"g" * 100))
    assert [e.status.code for e in r.entries] == [pb.OK, pb.OK]

    async def pull():
        async with PullConsumer("mr-g", d.namesrv) as c:
            q = (await c.fetch_queues("Timed"))[0]
            for _ in range(3):
                await c.pull(q, 0, 4)
    asyncio.run(pull())
    m = scrape(port)
    sends = {k: total(m, "rocketmq_rpc_latency_count", request_code=k, response_code="success")
             for k in ("send_message_v2", "send_batch_message")}
    assert sends == {"send_message_v2": 8, "send_batch_message": 1}  # a batch: one request
    assert total(m, "rocketmq_rpc_latency_count", request_code="pull_message") == 3
    assert total(m, "rocketmq_rpc_latency_count", protocol_type="grpc",
                 request_code="send_message", response_code="success") == 2
    assert total(m, "rocketmq_rpc_latency_count", protocol_type="remoting",
                 request_code="send_message") == 0
    assert total(m, "rocketmq_rpc_latency_sum", request_code="send_message_v2") > 0
    # cumulative buckets end at the count
    assert total(m, "rocketmq_rpc_latency_bucket", request_code="send_message_v2",
                 le="+Inf") == 8
    # per message: 19 small ones under 1 KiB stored, the 5,000-byte one above 4 KiB
    assert value(m, "rocketmq_message_size_count", topic="Timed") == 20 == \
        value(m, "rocketmq_messages_in_total", topic="Timed")
    assert value(m, "rocketmq_message_size_bucket", topic="Timed", le="1024.0") == 19
    assert value(m, "rocketmq_message_size_bucket", topic="Timed", le="4096.0") == 19
    assert value(m, "rocketmq_message_size_sum", topic="Timed") == \
        value(m, "rocketmq_throughput_in_total", topic="Timed")
    flushes = wait_until(lambda: value(scrape(port), "ledgermq_store_flush_latency_count"),
                         "a commit-log flush in the metrics", timeout=10)
    assert flushes >= 1


def test_a_paused_slave_lags_by_what_was_written_and_catches_up(tmp_path):
    d = tmp_path / "sync"
    # the paused slave's link is kept (no housekeeping close) so its lag stays visible
    st = up("sync", 2, d, {"syncFlushTimeout": "1000", "haHousekeepingInterval": "60000"})
    try:
        port = procs(d)["n0"]["metricsPort"]

        def lag():
            m = scrape(port)
            return (series(m, "ledgermq_replica_lag_bytes", "replica"),
                    series(m, "ledgermq_replica_lag_seconds", "replica"))
        def caught_up():
            return (b := lag()[0]) and list(b.values()) == [0]
        wait_until(caught_up, "the slave connected, in the master's metrics")
        assert send_all(st["namesrv"], "Lagged", [b"x" * 50] * 3) == [SendStatus.SEND_OK] * 3
        wait_until(caught_up, "the slave caught up, in the master's metrics")
        before = value(scrape(port), "rocketmq_throughput_in_total", topic="Lagged")
        with paused(procs(d)["n1"]["pid"]):
            got = send_all(st["namesrv"], "Lagged", [b"y" * 70], [b"z" * 30] * 5)
            assert got == [SendStatus.FLUSH_SLAVE_TIMEOUT] * 2
            m = scrape(port)
            written = value(m, "rocketmq_throughput_in_total", topic="Lagged") - before
            (replica, behind), = series(m, "ledgermq_replica_lag_bytes", "replica").items()
            assert behind == written > 0
            # the first of them waited a second for the slave before the second was sent
            assert series(m, "ledgermq_replica_lag_seconds", "replica")[replica] >= 1.0
            # what the producer waited for: the slave's timeout, in the send latency
            timed_out = dict(request_code="send_message_v2",
                             response_code="flush_slave_timeout")
            assert total(m, "rocketmq_rpc_latency_count", **timed_out) == 1
            assert total(m, "rocketmq_rpc_latency_sum", **timed_out) >= 1000
            assert total(m, "rocketmq_rpc_latency_bucket", le="100.0", **timed_out) == 0
        wait_until(lambda: lag() == ({replica: 0}, {replica: 0}),
                   lambda: f"the slave caught up in the metrics: {lag()}")
    finally:
        down(d)


def test_dledger_leader_reports_each_followers_lag(tmp_path):
    d = tmp_path / "dl"
    st = up("dledger", 3, d, {})
    try:
        ports = {n: p["metricsPort"] for n, p in procs(d).items() if p.get("kind") == "broker"}

        def leader():
            for name, port in ports.items():
                m = scrape(port)
                if value(m, "ledgermq_raft_role", role="LEADER"):
                    return name, m
        name, m = wait_until(leader, "a DLedger leader in the metrics")
        assert value(m, "ledgermq_raft_elections_won_total") >= 1
        port = ports[name]
        followers = sorted(set(ports) - {name})
        assert send_all(st["namesrv"], "Raft", [b"r" * 40] * 2) == [SendStatus.SEND_OK] * 2
        wait_until(lambda: series(scrape(port), "ledgermq_replica_lag_bytes", "replica") ==
                   {f: 0 for f in followers}, "both followers caught up in the leader's metrics")
        slow, other = followers
        before = value(scrape(port), "rocketmq_throughput_in_total", topic="Raft")
        with paused(procs(d)[slow]["pid"]):
            assert send_all(st["namesrv"], "Raft", [b"q" * 60] * 4) == [SendStatus.SEND_OK] * 4
            m = scrape(port)
            written = value(m, "rocketmq_throughput_in_total", topic="Raft") - before
            behind = series(m, "ledgermq_replica_lag_bytes", "replica")
            assert behind == {slow: written, other: 0}
            assert series(m, "ledgermq_replica_lag_seconds", "replica")[slow] > 0
        wait_until(lambda: series(scrape(port), "ledgermq_replica_lag_bytes", "replica") ==
                   {f: 0 for f in followers}, "the paused follower caught up")
    finally:
        down(d)


def test_control_node_endpoint_agrees_with_the_master_and_counts_cached_sends(tmp_path):
    d = tmp_path / "cp"
    st = up("checkpoint", 2, d, {"syncFlushTimeout": "500"})
    try:
        control = procs(d)["control"]["metricsPort"]
        assert control

        def master():
            for p in procs(d).values():
                if p.get("role") == "MASTER":
                    return p
        m = wait_until(master, "a checkpoint-mode master")
        slave = next(p for p in procs(d).values()
                     if p.get("kind") == "broker" and p["name"] != m["name"])
        # the slave joins the checkpoint first (else the sends wait, and are cached)
        wait_until(lambda: value(scrape(m["metricsPort"]), "ledgermq_checkpoint_members") == 1,
                   "the slave a member of the master's checkpoint")
        assert send_all(st["namesrv"], "Ckpt", [b"c" * 80] * 3) == [SendStatus.SEND_OK] * 3

        def agree():
            c, b = scrape(control), scrape(m["metricsPort"])
            ckpt = value(c, "ledgermq_control_checkpoint_offset", group="broker-a")
            return ckpt and ckpt == value(b, "ledgermq_checkpoint_offset") and (c, b)
        c, b = wait_until(agree, "the control node and the master on one checkpoint")
        assert value(c, "ledgermq_control_epoch", group="broker-a") == \
            value(b, "ledgermq_checkpoint_epoch") >= 1
        assert value(c, "ledgermq_control_members", group="broker-a") == 1
        assert value(c, "ledgermq_control_cached_messages", group="broker-a") == 0
        lag = series(b, "ledgermq_replica_lag_bytes", "replica")
        assert list(lag.values()) == [0], lag  # the slave, by its slot
        with paused(slave["pid"]):  # not covered by the checkpoint in time: cached
            assert send_all(st["namesrv"], "Ckpt", [b"d" * 80]) == [SendStatus.SEND_OK]
            c, b = scrape(control), scrape(m["metricsPort"])
            assert value(b, "ledgermq_checkpoint_cached_sends_total") == 1
            assert value(b, "ledgermq_checkpoint_pending_sends_total") == 0
            assert value(c, "ledgermq_control_cached_messages", group="broker-a") == 1
            assert value(c, "ledgermq_control_failovers_total", group="broker-a") == 0
    finally:
        down(d)
