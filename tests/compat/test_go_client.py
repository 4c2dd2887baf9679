"""RocketMQ's Go clients against `ledgermq dev` (#30), built by `go` from
tests/compat/go/go.mod (versions pinned there) once into .cache/go-compat/:
- remoting (github.com/apache/rocketmq-client-go/v2): admin CreateTopic; sync, async,
  oneway, batch, orderly, delayed, tagged and transactional sends; push consumers with a
  tag filter, with retry through %RETRY%, and broadcasting; a pull consumer;
- gRPC (github.com/apache/rocketmq-clients/golang/v5), which always speaks TLS: producer
  (normal, FIFO, delay, transactions) and SimpleConsumer against a TLS endpoint.
Skips, saying why, only where `go` is missing. All run in `make compat`: the first builds
of the two drivers alone take over two minutes, beyond `make test`'s 20-minute budget."""
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ledgermq.client.admin import Admin
from ledgermq.localcluster.certs import CertAuthority
from ledgermq.remoting.tls import client_context

from ..dev_process import DevProcess
from ..integration.load import until_read

# (make compat: building the two Go drivers alone takes over two minutes on a fresh machine)
pytestmark = [pytest.mark.skipif(shutil.which("go") is None,
                                 reason="RocketMQ's Go clients need Go: `go` is not on PATH"),
              pytest.mark.compat]
MODULE = Path(__file__).with_name("go")
CACHE = Path(__file__).parents[2] / ".cache" / "go-compat"


def binary(name: str) -> Path:
    """tests/compat/go/<name> built once per version of the module's files."""
    files = [MODULE / "go.mod", MODULE / "go.sum", *sorted((MODULE / name).glob("*.go")),
             *sorted((MODULE / "cli").glob("*.go"))]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
    out = CACHE / digest / name
    if not out.exists():
        r = subprocess.run(["go", "build", "-o", str(out), f"./{name}"], cwd=MODULE,
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"go build {name}:\n{r.stderr[-3000:]}"
    return out


def go(name: str, *args, timeout=120, home: Path | None = None) -> dict:
    """Run one command of a Go driver; its last JSON line."""
    env = {**os.environ, "HOME": str(home or CACHE)}  # (the clients log under $HOME)
    r = subprocess.run([str(binary(name)), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])


@pytest.fixture(scope="module")
def dev(tmp_path_factory):  # (open transactions checked back within a second)
    d = DevProcess(tmp_path_factory.mktemp("go"), {
        "transactionTimeOut": "400", "transactionCheckInterval": "200"}).start()
    yield d
    d.stop()


def test_admin_creates_a_topic_and_every_way_of_sending_lands(dev):
    assert go("remoting", "create", dev.namesrv, dev.broker, "GoWays", 3) == \
        {"created": "GoWays", "queues": 3}
    sent = {way: go("remoting", "produce", dev.namesrv, "GoWays", 4, way)["sent"]
            for way in ("sync", "async", "oneway", "batch", "tag")}
    assert sent["oneway"] == []  # (no answer to a oneway send)
    for way in ("sync", "async", "tag"):
        assert [s["status"] for s in sent[way]] == [0] * 4, sent[way]  # SendOK
        assert len({s["id"] for s in sent[way]}) == 4
    (batch,) = sent["batch"]
    # the broker's ids, one a message (the client's own id of a batch is empty)
    assert batch["status"] == 0 and len(batch["offset_id"].split(",")) == 4, batch
    assert until_read(dev.namesrv, "GoWays", 20) == sorted(f"go-{i}" for i in range(4) for _ in range(5))


def test_orderly_sends_keep_each_key_on_one_queue_in_order(dev):
    go("remoting", "create", dev.namesrv, dev.broker, "GoOrderly", 4)
    sent = go("remoting", "produce", dev.namesrv, "GoOrderly", 12, "orderly")["sent"]
    for key in range(3):
        mine = sent[key::3]  # the sends whose sharding key was order-<key>
        assert len({s["queue"] for s in mine}) == 1, sent
        assert [s["offset"] for s in mine] == sorted(s["offset"] for s in mine)


def test_delayed_and_transactional_sends(dev):
    go("remoting", "produce", dev.namesrv, "GoDelay", 2, "delay")
    assert until_read(dev.namesrv, "GoDelay", 2) == ["go-0", "go-1"]
    out = go("remoting", "tx", dev.namesrv, "GoTx")
    assert out["states"] == {"tx-commit": 1, "tx-rollback": 2, "tx-check": 3}  # as sent
    assert out["checked"][:1] == ["tx-check"]  # the broker asked back about the open one
    assert until_read(dev.namesrv, "GoTx", 2) == ["tx-check", "tx-commit"]  # never the rollback


def test_push_consumers_filter_by_tag_retry_and_broadcast(dev):
    go("remoting", "produce", dev.namesrv, "GoPush", 6, "tag")  # TagA, TagB, TagA, ...
    got = go("remoting", "push", dev.namesrv, "go-tag", "GoPush", "TagA", 3, 60)
    assert got["bodies"] == ["go-0", "go-2", "go-4"]
    # each message fails once and comes back through the group's %RETRY% topic (made
    # first: the client reads routes at its start and then only every 30 s)
    go("remoting", "create", dev.namesrv, dev.broker, "%RETRY%go-retry", 1)
    again = go("remoting", "push", dev.namesrv, "go-retry", "GoPush", "TagB", 3, 90, "retry")
    assert again["bodies"] == ["go-1", "go-3", "go-5"]
    assert set(again["reconsume_times"].values()) == {1}
    # broadcasting: two consumers of one group each get every message
    procs = [subprocess.Popen([str(binary("remoting")), "push", dev.namesrv, "go-broadcast",
                               "GoPush", "*", "6", "60", "broadcast"], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "HOME": str(CACHE)})
             for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=90)[0].splitlines()[-1]) for p in procs]
    for out in outs:
        assert out["bodies"] == [f"go-{i}" for i in range(6)]


def test_a_message_failed_past_max_reconsume_times_lands_in_the_dlq(dev):
    go("remoting", "create", dev.namesrv, dev.broker, "GoDlq", 1)
    go("remoting", "create", dev.namesrv, dev.broker, "%RETRY%go-dlq", 1)  # (see above)
    go("remoting", "produce", dev.namesrv, "GoDlq", 2, "sync")
    go("remoting", "push", dev.namesrv, "go-dlq", "GoDlq", "*", 99, 3, "dlq")
    # delivered, failed, retried once (maxReconsumeTimes=1), failed: the group's %DLQ%
    assert until_read(dev.namesrv, "%DLQ%go-dlq", 2) == ["go-0", "go-1"]


def test_a_pull_consumer_reads_every_queue(dev):
    go("remoting", "create", dev.namesrv, dev.broker, "GoPull", 2)
    go("remoting", "produce", dev.namesrv, "GoPull", 7, "sync")
    got = go("remoting", "pull", dev.namesrv, "go-pull", "GoPull", 7, 30)
    assert got == {"bodies": [f"go-{i}" for i in range(7)], "queues": 2}


@pytest.fixture(scope="module")
def tls_dev(tmp_path_factory):
    """The Go gRPC client has no plaintext mode: an endpoint serving TLS (the test's CA)."""
    d = tmp_path_factory.mktemp("go-tls")
    ca = CertAuthority.create(d / "pki")
    cert, key = ca.issue(d / "pki", "broker")
    dev = DevProcess(d / "dev", {
        "grpcServerPort": "0", "tls.server.mode": "enforcing", "tls.server.certPath": str(cert),
        "tls.server.keyPath": str(key), "tls.enable": "true",
        "tls.client.trustCertPath": str(ca.cert_path), "transactionTimeOut": "400",
        "transactionCheckInterval": "200"}).start()
    dev.ca = ca
    yield dev
    dev.stop()


def create(d: DevProcess, topic: str) -> str:
    async def make():
        async with Admin(d.namesrv, tls=client_context(d.ca.cert_path)) as a:
            await a.update_topic(topic, read_queues=2, write_queues=2)
    asyncio.run(make())
    return d.ready["grpc"]


@pytest.mark.compat  # (make compat: the gRPC client's first build takes ~80 s)
def test_grpc_producer_and_simple_consumer(tls_dev):
    ep = create(tls_dev, "GoV5")
    sent = go("grpc", "produce", ep, "GoV5", 5, "normal")
    got = go("grpc", "consume", ep, "go-v5", "GoV5", 5, 30)["messages"]
    assert sorted(m["body"] for m in got) == [f"normal-{i}" for i in range(5)]
    assert {m["id"] for m in got} == set(sent["ids"])
    one = next(m for m in got if m["body"] == "normal-2")
    assert (one["tag"], one["keys"], one["attempt"]) == ("TagGo", ["key-2"], 1)


@pytest.mark.compat
def test_grpc_fifo_delay_and_transactions(tls_dev):
    ep = create(tls_dev, "GoV5Kinds")
    go("grpc", "produce", ep, "GoV5Kinds", 4, "fifo")
    delayed = go("grpc", "produce", ep, "GoV5Kinds", 1, "delay")
    go("grpc", "produce", ep, "GoV5Kinds", 1, "tx-commit")
    go("grpc", "produce", ep, "GoV5Kinds", 1, "tx-rollback")
    checked = go("grpc", "produce", ep, "GoV5Kinds", 1, "tx-check")
    assert checked["checked"] == ["tx-check-0"]  # the broker asked back about the open one
    got = go("grpc", "consume", ep, "go-v5-kinds", "GoV5Kinds", 7, 40)["messages"]
    assert sorted(m["body"] for m in got) == sorted(
        [f"fifo-{i}" for i in range(4)] + ["delay-0", "tx-commit-0", "tx-check-0"])
    assert {m["group"] for m in got if m["body"].startswith("fifo")} == {"group-0", "group-1"}
    assert delayed["ids"] and any(m["id"] == delayed["ids"][0] for m in got)


@pytest.mark.compat  # (make compat: a 3-broker group, a kill and a catch-up)
def test_a_go_sender_across_a_kill_of_the_dledger_leader(tmp_path):
    """The Go client sending one message at a time while the DLedger leader is killed -9:
    it sends again once its route names the new leader (the client reads routes every
    30 s, and on a failed send), and every message it was acknowledged is read back."""
    from bench.rocketmq_bench import failover
    from bench.rocketmq_sides import side
    with side("ledgermq", "dledger", tmp_path / "group") as s:
        out = failover(s, 1, tmp_path, lambda ns, topic, acked: [
            str(binary("remoting")), "failover", ns, topic, str(acked)])
    assert out["acked"] > 0 and out["lost"] == 0, out
    assert out["max_s"] < 40, out
