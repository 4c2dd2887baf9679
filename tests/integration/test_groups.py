"""Several broker groups and several name servers, as real processes (`cluster up --groups
--namesrvs`, single-broker groups of classic HA where the mode does not matter): the
layout and its CLI, a dead name server nobody notices, a topic that keeps serving while
one whole group is down or hung, and nothing acknowledged lost when it comes back."""
import asyncio
import json
import os
import signal
import time

from ledgermq import Message, Producer, PushConsumer
from ledgermq.client.admin import Admin
from ledgermq.client.instance import MQClientError
from ledgermq.localcluster.cluster import down, start, stop, up
from ledgermq.remoting import RemotingCommand, RequestCode

from ..wait import until, wait_until
from .load import read_all
from .test_cli import cli


def procs(d):
    return {p["name"]: p for p in json.loads((d / "cluster.json").read_text())["processes"]}


async def read_every_queue(namesrv, topic) -> dict[tuple[str, int], list[bytes]]:
    """{(broker name, queue id): bodies in queue order} of every queue of `topic`."""
    return await read_all(namesrv, topic=topic, by_broker=True)


async def routed_at_once(names: list[str]) -> list[list[str]]:
    """Topics created one after another, each looked up on every name server as soon as
    the creation was answered: the groups each name server routes it to."""
    seen = []
    async with Admin(";".join(names)) as admin:
        for i in range(10):
            await admin.update_topic(f"AtOnce{i}", read_queues=1, write_queues=1)
            for ns in names:
                async with Admin(ns) as one:
                    try:
                        route = await one.topic_route(f"AtOnce{i}")
                    except MQClientError:  # TOPIC_NOT_EXIST: not routed yet
                        route = {"queueDatas": []}
                seen.append(sorted(q["brokerName"] for q in route["queueDatas"]))
    return seen


def grpc_route(endpoint: str, topic: str) -> set[tuple[str, str]]:
    """(group, gRPC endpoint) of every queue of `topic`, as QueryRoute answers it."""
    import grpc
    from ledgermq.apis import definition_pb2 as pb
    from ledgermq.apis import service_pb2 as svc
    from ledgermq.apis import rpc
    with grpc.insecure_channel(endpoint) as ch:
        r = rpc.Stub(ch).QueryRoute(
            svc.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=[("x-mq-client-id", "routes")], timeout=10)
    assert r.status.code == pb.OK, r.status
    return {(q.broker.name, "%s:%d" % (q.broker.endpoints.addresses[0].host,
                                        q.broker.endpoints.addresses[0].port))
            for q in r.message_queues}


def status(d):
    p = cli("cluster", "status", "--dir", d, "--json", check=False)
    return p.returncode, json.loads(p.stdout)


def test_cluster_up_with_two_groups_and_two_name_servers(tmp_path):
    d = tmp_path / "c"
    state = json.loads(cli("cluster", "up", "--mode", "async", "--replicas", 1, "--groups", 2,
                           "--namesrvs", 2, "--dir", d, "--json").stdout)
    try:
        assert state["groups"] == ["broker-a", "broker-b"]
        assert [p["name"] for p in state["processes"]] == ["namesrv0", "namesrv1", "a-n0",
                                                           "b-n0"]
        names = state["namesrv"].split(";")
        assert len(names) == 2
        for ns in names:  # every broker registered with every name server
            info = json.loads(cli("admin", "clusterList", "-n", ns, "--json").stdout)
            assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
        both = state["namesrv"]
        cli("admin", "updateTopic", "-n", both, "-t", "Spread", "-c", "DefaultCluster",
            "-r", 2, "-w", 2)
        route = json.loads(cli("admin", "topicRoute", "-n", both, "-t", "Spread",
                               "--json").stdout)
        assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-a", "broker-b"]
        assert asyncio.run(routed_at_once(names)) == [["broker-a", "broker-b"]] * 20
        # a RocketMQ 5 client given one broker's gRPC endpoint finds both groups' endpoints
        grpc_ports = {p["group"]: p["grpcPort"] for p in state["processes"]
                      if p["kind"] == "broker"}
        assert grpc_route("127.0.0.1:%d" % grpc_ports["broker-a"], "Spread") == {
            ("broker-a", f"127.0.0.1:{grpc_ports['broker-a']}"),
            ("broker-b", f"127.0.0.1:{grpc_ports['broker-b']}")}
        code, st = wait_until(lambda: (lambda r: r if r[0] == 0 else None)(status(d)),
                              "both groups healthy")
        assert st["health"] == "broker-a: master a-n0, 1/1 up; broker-b: master b-n0, 1/1 up"
        assert "group" in cli("cluster", "status", "--dir", d).stdout
        assert cli("cluster", "stop", "b-n0", "--kill", "--dir", d).stdout.strip() == \
            "b-n0 stopped"
        code, st = status(d)
        assert code == 1 and st["health"] == ("broker-a: master a-n0, 1/1 up; "
                                              "broker-b: no master, 0/1 up; down: b-n0")
        assert cli("cluster", "start", "b-n0", "--dir", d).stdout.startswith("b-n0 started")
        wait_until(lambda: status(d)[0] == 0, "both groups whole again")
    finally:
        out = cli("cluster", "down", "--dir", d).stdout
    assert out.strip().startswith("stopped 4 of 4 processes")


def test_a_dead_name_server_is_invisible_to_clients(tmp_path):
    """Clients given 'a;b' keep working with either one dead, a long-lived client as well
    as new ones; a name server that comes back learns the brokers again within seconds."""
    d = tmp_path / "c"
    state = up("async", 1, d, namesrvs=2)
    both = state["namesrv"]
    try:
        cli("admin", "updateTopic", "-n", both, "-t", "NS", "-c", "DefaultCluster")

        async def go():
            async with Producer("p", both, send_timeout=3) as p:
                assert (await p.send(Message("NS", b"before"))).status.value == "SEND_OK"
                stop(d, "namesrv0", signal.SIGKILL)  # the one every client asks first
                # a new client, and the long-lived one after its route is looked up again
                sent = json.loads(cli("produce", "-n", both, "-t", "NS", "--count", 20,
                                      "--body", "cli {i}", "--json").stdout)
                assert sent["statuses"] == {"SEND_OK": 20}
                await p.instance.route("NS", refresh=True)
                assert (await p.send(Message("NS", b"after"))).status.value == "SEND_OK"
                assert "NS" in json.loads(cli("admin", "topicList", "-n", both,
                                              "--json").stdout)
                # back, but empty until the brokers register again: clients ask the other
                start(d, "namesrv0")
                sent = json.loads(cli("produce", "-n", both, "-t", "NS", "--count", 5,
                                      "--body", "back {i}", "--json").stdout)
                assert sent["statuses"] == {"SEND_OK": 5}
                stop(d, "namesrv1", signal.SIGKILL)
                t0 = time.monotonic()
                wait_until(lambda: json.loads(cli(
                    "produce", "-n", both, "-t", "NS", "--count", 5, "--body", "only0 {i}",
                    "--json", check=False).stdout or "{}").get("statuses") == {"SEND_OK": 5},
                    "a send through the restarted name server alone", timeout=8)
                relearned = time.monotonic() - t0
                await p.instance.route("NS", refresh=True)
                assert (await p.send(Message("NS", b"last"))).status.value == "SEND_OK"
            return relearned
        relearned = asyncio.run(go())
        stored = [b for q in asyncio.run(read_every_queue(both.split(";")[0], "NS")).values()
                  for b in q]
        expected = {b"before", b"after", b"last"} | {f"cli {i}".encode() for i in range(20)} \
            | {f"back {i}".encode() for i in range(5)}
        assert expected <= set(stored)
        print(f"routes relearned by the restarted name server in {relearned:.1f}s")
    finally:
        down(d)


def test_a_topic_keeps_serving_with_one_group_killed(tmp_path):
    """Group broker-b killed (-9) under load: every send after it is acknowledged (by
    broker-a's queues), a push consumer keeps receiving, and once broker-b is back every
    acknowledged message is readable and consumed."""
    d = tmp_path / "c"
    state = up("async", 1, d, groups=2, namesrvs=2)
    ns = state["namesrv"]
    try:
        cli("admin", "updateTopic", "-n", ns, "-t", "Two", "-c", "DefaultCluster",
            "-r", 4, "-w", 4)

        async def go():
            acked, got = [], set()
            c = PushConsumer("g", ns, consume_from="CONSUME_FROM_FIRST_OFFSET",
                             rebalance_interval=1, pull_suspend_ms=300)
            c.subscribe("Two")
            c.register_listener(lambda msgs: got.update(m.body for m in msgs) or True)
            await c.start()
            try:
                async with Producer("p", ns, send_timeout=2) as p:
                    for i in range(40):
                        r = await p.send(Message("Two", f"before-{i}".encode()))
                        acked.append((r.queue.broker_name, f"before-{i}".encode()))
                    assert {b for b, _ in acked} == {"broker-a", "broker-b"}
                    stop(d, "b-n0", signal.SIGKILL)
                    after = []
                    for i in range(60):
                        r = await p.send(Message("Two", f"after-{i}".encode()))
                        assert r.status.value == "SEND_OK", r
                        after.append((r.queue.broker_name, f"after-{i}".encode()))
                    assert {b for b, _ in after} == {"broker-a"}
                    await until(lambda: {m for _, m in after} <= got,
                                "the consumer reading broker-a's queues", timeout=20)
                    start(d, "b-n0")
                    await until(lambda: {m for _, m in acked + after} <= got,
                                "every acknowledged message consumed", timeout=30)
            finally:
                await c.shutdown()
            return acked + after
        sent = asyncio.run(go())
        stored = asyncio.run(read_every_queue(ns, "Two"))
        for broker, body in sent:
            assert any(body in q for (b, _), q in stored.items() if b == broker), body
    finally:
        down(d)


def test_a_hung_group_costs_one_timeout_not_one_per_send(tmp_path):
    """Group broker-b stopped (SIGSTOP): its connections stay open and the name servers
    keep its route for two minutes. The producer isolates it after the first send that
    times out there; the sends after that go to broker-a without waiting."""
    d = tmp_path / "c"
    state = up("async", 1, d, groups=2)
    ns = state["namesrv"]
    hung = procs(d)["b-n0"]["pid"]
    try:
        cli("admin", "updateTopic", "-n", ns, "-t", "Hung", "-c", "DefaultCluster",
            "-r", 4, "-w", 4)

        async def go():
            async with Producer("p", ns, send_timeout=1) as p:
                for i in range(8):  # connections to both groups are open
                    await p.send(Message("Hung", f"warm-{i}".encode()))
                os.kill(hung, signal.SIGSTOP)
                took = []
                for i in range(30):
                    t0 = time.monotonic()
                    r = await p.send(Message("Hung", f"h-{i}".encode()))
                    took.append(time.monotonic() - t0)
                    assert r.status.value == "SEND_OK" and r.queue.broker_name == "broker-a"
                return took
        took = asyncio.run(go())
        slow = [round(t, 2) for t in took if t > 0.5]
        print(f"30 sends with broker-b hung: {sum(took):.2f}s in all, slow ones {slow}")
        assert len(slow) <= 1, f"{len(slow)} of 30 sends waited on the hung group: {slow}"
    finally:
        os.kill(hung, signal.SIGCONT)
        down(d)


def test_a_slave_syncs_from_its_master_with_the_first_name_server_dead(tmp_path):
    """A slave copies its master's topics (and offsets) through what the name servers say
    about its group; with the first of its name servers dead it asks the next."""
    d = tmp_path / "c"
    state = up("async", 2, d, namesrvs=2)
    try:
        stop(d, "namesrv0", signal.SIGKILL)
        master, slave = (f"127.0.0.1:{procs(d)[n]['port']}" for n in ("n0", "n1"))
        cli("admin", "updateTopic", "-n", state["namesrv"], "-t", "OnMaster", "-b", master)

        async def slave_topics():
            async with Admin(state["namesrv"]) as a:
                r = await a.instance.broker_request(slave, RemotingCommand(
                    RequestCode.GET_ALL_TOPIC_CONFIG))
                return json.loads(r.body)["topicConfigTable"]
        wait_until(lambda: "OnMaster" in asyncio.run(slave_topics()),
                   "the slave copying the master's new topic", timeout=10)
    finally:
        down(d)
