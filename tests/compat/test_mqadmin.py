"""RocketMQ's own admin tool, mqadmin (org.apache.rocketmq.tools.command.MQAdminStartup
from rocketmq-tools on Maven Central, through the anchor's pom), against `ledgermq dev`
(#30): its commands work and their output reads as against RocketMQ; a command ledgermq
does not serve gets a clear error naming the request code, not a hang. The commands of a
test run in one JVM (JavaClient.java's `admin`). Skips, saying why, only where Java or
Maven is missing."""
import asyncio
import re

import pytest

from bench.rocketmq_anchor import missing_tools

from ..dev_process import DevProcess
from .test_java_client import java

pytestmark = pytest.mark.skipif(missing_tools() is not None,
                                reason=f"mqadmin needs Java and Maven: {missing_tools()}")


def mqadmin(*commands: list[str]) -> list[str]:
    """Each command's output, the commands run one after the other in one JVM."""
    args = [a for c in commands for a in ["---", *c]][1:]
    return [r["out"] for r in java("admin", *args)]


def rows(out: str) -> list[list[str]]:
    """A table mqadmin printed: its rows after the #header, split on whitespace."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#"))
    return [line.split() for line in lines[start + 1:] if line.strip()]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    d = DevProcess(tmp_path_factory.mktemp("mqadmin")).start()
    yield d
    d.stop()


def test_topics_cluster_and_brokers(dev):
    ns = ["-n", dev.namesrv]
    created, listed, route, status, cluster, broker, unserved = mqadmin(
        ["updateTopic", *ns, "-c", "DefaultCluster", "-t", "AdminTopic", "-r", "4", "-w", "4"],
        ["topicList", *ns], ["topicRoute", *ns, "-t", "AdminTopic"],
        ["topicStatus", *ns, "-t", "AdminTopic"], ["clusterList", *ns],
        ["brokerStatus", *ns, "-b", dev.broker],
        ["cleanExpiredCQ", *ns, "-b", dev.broker])
    assert f"create topic to {dev.broker} success" in created, created
    assert "AdminTopic" in listed.split()
    assert '"brokerName":"broker-a"' in route.replace(" ", "").replace("\t", "")
    assert [(r[0], r[1]) for r in rows(status)[:4]] == [("broker-a", str(q)) for q in range(4)]
    assert rows(cluster)[0][:4] == ["DefaultCluster", "broker-a", "0", dev.broker]
    assert "brokerName" in broker and "broker-a" in broker
    # a command ledgermq does not serve: a clear error naming the request, not a hang
    assert "is not supported by this broker" in unserved, unserved


@pytest.mark.compat  # (make compat: a consumer JVM's start-up, ~10 s)
def test_consumer_progress_and_a_message_by_key(dev):
    java("produce", dev.namesrv, "AdminProgress", 2, "TagA")
    java("push", dev.namesrv, "admin-progress", "AdminProgress", "*", 4, 60, "false")
    progress, found = mqadmin(["consumerProgress", "-n", dev.namesrv, "-g", "admin-progress"],
                              ["queryMsgByKey", "-n", dev.namesrv, "-t", "AdminProgress",
                               "-k", "key-1"])
    table = [r for r in rows(progress) if r and r[0] == "AdminProgress"]
    assert sum(int(r[3]) for r in table) == 4  # broker offsets: every message
    # all consumed, nothing in flight (it showed -1, -2 before pullOffset was written)
    assert all(r[3] == r[4] and r[5] == "0" and r[6] == "0" for r in table), table
    assert "@AdminProgress@K@key-1@" in found, found



@pytest.mark.compat  # (make compat: a consumer JVM's start-up and rebalance)
def test_reset_offsets_by_time_and_read_by_offset(dev):
    """resetOffsetByTime reads the broker's answer (before: a list where mqadmin reads
    RocketMQ's map keyed by queues, and the command failed); queryMsgByOffset prints the
    message and which groups consume its topic (QUERY_TOPIC_CONSUME_BY_WHO)."""
    ns = ["-n", dev.namesrv]
    sent = java("produce", dev.namesrv, "AdminReset", 2, "TagA")  # 4 messages
    java("push", dev.namesrv, "admin-reset", "AdminReset", "*", 4, 60, "false")
    first = sent[0]  # (queues are picked at random: ask where one landed)
    reset, by_offset, progress = mqadmin(
        ["resetOffsetByTime", *ns, "-g", "admin-reset", "-t", "AdminReset", "-s", "0"],
        ["queryMsgByOffset", *ns, "-t", "AdminReset", "-b", "broker-a", "-i",
         first["queueId"], "-o", first["queueOffset"]],
        ["consumerProgress", *ns, "-g", "admin-reset"])
    table = rows(reset)
    assert sorted(r[1] for r in table) == ["0", "1", "2", "3"], reset
    assert {r[0] for r in table} == {"broker-a"} and {r[2] for r in table} == {"0"}, reset
    # back to the start: everything is to be consumed again
    left = [r for r in rows(progress) if r and r[0] == "AdminReset"]
    assert sum(int(r[3]) - int(r[4]) for r in left) == 4, progress
    assert re.search(r"Topic:\s+AdminReset", by_offset), by_offset
    assert "admin-reset" in by_offset and "Exception" not in by_offset, by_offset


@pytest.mark.compat  # (make compat; tests/broker/test_broker_config_admin.py in make test)
def test_broker_config_read_and_changed_live(dev):
    """getBrokerConfig lists broker.conf's keys (no secret among them); updateBrokerConfig
    changes a key the broker reads at each use, at once, and refuses one read at start."""
    ns = ["-n", dev.namesrv, "-b", dev.broker]
    before, changed, refused, after = mqadmin(
        ["getBrokerConfig", *ns], ["updateBrokerConfig", *ns, "-k", "maxMessageSize",
                                   "-v", "65536"],
        ["updateBrokerConfig", *ns, "-k", "brokerName", "-v", "other"], ["getBrokerConfig", *ns])
    config = dict(line.split("=", 1) for line in before.splitlines() if "=" in line
                  and not line.startswith("="))
    config = {k.strip(): v.strip() for k, v in config.items()}
    assert config["brokerName"] == "broker-a" and config["maxMessageSize"] == str(4 << 20)
    assert "clusterSecret" not in config
    assert "update broker config success" in changed, changed
    assert "brokerName is read when the broker starts" in refused, refused
    assert "maxMessageSize                                    =  65536" in after, after

    from ledgermq import Message, Producer

    async def big():
        async with Producer("admin-big", dev.namesrv) as p:
            return await p.send(Message("AdminBig", b"x" * 100_000))
    with pytest.raises(Exception, match="maxMessageSize"):
        asyncio.run(big())


@pytest.mark.compat  # (make compat: a controller-mode group of 3 + 3)
def test_controller_mode_commands(tmp_path):
    """getControllerMetaData, getSyncStateSet (found through the metadata's leader) and
    getBrokerEpoch against a ledgermq controller-mode group; electMaster is refused with
    the reason (the group has a cluster secret, which mqadmin cannot prove)."""
    from ledgermq.localcluster.cluster import down, up
    from ..integration.test_controller_mode import full_set, master_name, procs

    d = tmp_path / "ctl"
    state = up("controller", 3, d, controllers=3)
    try:
        full_set(state)
        controller = f"127.0.0.1:{procs(d)['c0']['port']}"
        master = procs(d)[master_name(d)]
        meta, sync_set, epochs = mqadmin(
            ["getControllerMetaData", "-a", controller],
            ["getSyncStateSet", "-a", controller, "-b", "broker-a"],
            ["getBrokerEpoch", "-n", state["namesrv"], "-b", "broker-a"])
        leader = re.search(r"#ControllerLeaderAddress\s+(\S+)", meta)
        assert leader and leader[1] in state["controllerAddr"].split(";"), meta
        assert re.search(r"#ControllerGroup\s+\S+", meta) and "null" not in meta, meta
        assert f"#MasterAddr\t127.0.0.1:{master['port']}" in sync_set.replace(" ", ""), sync_set
        assert sync_set.count("InSyncReplica:") == 3 and "alive=true" in sync_set, sync_set
        assert "#clusterName\tDefaultCluster" in epochs and "#Epoch" in epochs, epochs
        assert "Exception" not in sync_set + epochs, sync_set + epochs
        # handing the master role over needs the cluster secret, which mqadmin cannot show:
        # refused, saying so (`ledgermq admin electMaster` does it)
        (elected,) = mqadmin(["electMaster", "-a", controller, "-c", "DefaultCluster",
                              "-bn", "broker-a", "-b", "2"])
        assert "without authenticating (this controller requires the cluster secret)" \
            in elected, elected
    finally:
        down(d)


def test_producer_connections_of_an_online_group(dev):
    """producerConnection lists the connections whose heartbeats named the group."""
    from ledgermq import Message, Producer

    async def with_producer_online():
        async with Producer("admin-producer", dev.namesrv) as p:
            await p.send(Message("AdminProducer", b"x"))
            await p._heartbeat()  # (its periodic one came before it knew the broker)
            return await asyncio.to_thread(mqadmin, [
                "producerConnection", "-n", dev.namesrv, "-g", "admin-producer",
                "-t", "AdminProducer"], ["producerConnection", "-n", dev.namesrv, "-g",
                                         "nobody-here", "-t", "AdminProducer"])
    online, absent = asyncio.run(with_producer_online())
    (row,) = [line.split() for line in online.splitlines() if line.strip()]
    assert row[0] == "0001" and row[3] == "PYTHON", online  # index, id, address, language
    assert "the producer group[nobody-here] not exist" in absent, absent


def test_create_a_topic_on_every_broker_of_a_cluster(dev):
    """DefaultMQAdminExt.createTopic(clusterName, topic, n), as RocketMQ's own end-to-end
    suite creates its topics: the cluster's name is a topic whose route names the
    cluster's brokers (RocketMQ's clusterTopicEnable); before, it had no route and every
    such creation failed."""
    (out,) = java("create-topic", dev.namesrv, "DefaultCluster", "AdminByCluster", 8)
    assert out == {"created": "AdminByCluster", "writeQueues": "8"}, out
