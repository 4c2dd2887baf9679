"""RocketMQ's own admin tool, mqadmin (org.apache.rocketmq.tools.command.MQAdminStartup
from rocketmq-tools on Maven Central, through the anchor's pom), against `ledgermq dev`
(#30): its commands work and their output reads as against RocketMQ; a command ledgermq
does not serve gets a clear error naming the request code, not a hang. The commands of a
test run in one JVM (JavaClient.java's `admin`). Skips, saying why, only where Java or
Maven is missing."""
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
        ["brokerStatus", *ns, "-b", dev.broker], ["getBrokerConfig", *ns, "-b", dev.broker])
    assert f"create topic to {dev.broker} success" in created, created
    assert "AdminTopic" in listed.split()
    assert '"brokerName":"broker-a"' in route.replace(" ", "").replace("\t", "")
    assert [(r[0], r[1]) for r in rows(status)[:4]] == [("broker-a", str(q)) for q in range(4)]
    assert rows(cluster)[0][:4] == ["DefaultCluster", "broker-a", "0", dev.broker]
    assert "brokerName" in broker and "broker-a" in broker
    # a command ledgermq does not serve: a clear error naming the request, not a hang
    assert "request code 26 is not supported by this broker" in unserved, unserved


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

