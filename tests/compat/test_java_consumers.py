"""RocketMQ's Java remoting client's consumers against `ledgermq dev` (#30), 5.5.0 and 4.9.8,
through tests/compat/java/JavaConsumers.java: an orderly push consumer whose suspended
message holds its queue back, two broadcasting consumers of one group each getting every
message, the dead-letter queue after maxReconsumeTimes, an SQL92 selector, the lite pull
consumer's assign mode with seek and a manual commit, DefaultMQPullConsumer, and a timer
message sent with 5.x's setDeliverTimeMs. All in `make compat` (a consumer JVM each)."""
import asyncio
import time
import uuid
from pathlib import Path

import pytest

from bench.rocketmq_anchor import compile_java, missing_tools
from ledgermq.client.admin import Admin

from ..dev_process import DevProcess
from .drivers import create_topic, run_java
from ..integration.load import until_read
from .test_java_client import CACHE, POMS, client_classpath

pytestmark = [pytest.mark.skipif(missing_tools() is not None,
                                 reason=f"RocketMQ's Java client needs Java and Maven: "
                                        f"{missing_tools()}"),
              pytest.mark.compat]
DRIVER = Path(__file__).with_name("java") / "JavaConsumers.java"


def java(client: str, *args, timeout=120) -> list[dict]:
    cp = client_classpath(client)
    return run_java("JavaConsumers", compile_java(DRIVER, CACHE / client, cp), cp, *args,
                    options=("-Drocketmq.client.rebalance.waitInterval=1000",),
                    timeout=timeout)


@pytest.fixture(scope="module")
def dev(tmp_path_factory):  # (SQL92 on, short delay levels: a retry within a second)
    d = DevProcess(tmp_path_factory.mktemp("java-consumers"),
                   {"enablePropertyFilter": "true"}).start()
    yield d
    d.stop()


def topic(d: DevProcess, name: str, queues: int = 2) -> str:
    create_topic(d.namesrv, name, queues)
    return name


@pytest.mark.parametrize("client", POMS)
def test_orderly_consumer_holds_its_queue_back_for_a_suspended_message(dev, client):
    t = topic(dev, f"JOrderly{client[0]}")
    java(client, "send", dev.namesrv, t, 6)
    got = java(client, "orderly", dev.namesrv, f"j-orderly-{client[0]}", t, 6, 60, "true")
    # m-0 was suspended once: nothing after it came before it came again
    assert [m["body"] for m in got] == [f"m-{i}" for i in range(6)]


@pytest.mark.parametrize("client", POMS)
def test_broadcasting_consumers_each_get_every_message(dev, client):
    t = topic(dev, f"JBroadcast{client[0]}")
    java(client, "send", dev.namesrv, t, 4)
    # (a broadcasting group's offsets live in the client's home: a new group each run)
    group = f"j-broadcast-{client[0]}-{uuid.uuid4().hex[:8]}"
    got = java(client, "broadcast", dev.namesrv, group, t, 4, 60)
    for who in ("b1", "b2"):
        assert sorted(m["body"] for m in got if m["who"] == who) == [f"m-{i}" for i in range(4)]


@pytest.mark.parametrize("client", POMS)
def test_a_message_failing_past_max_reconsume_times_lands_in_the_dlq(dev, client):
    t, group = topic(dev, f"JDlq{client[0]}"), f"j-dlq-{client[0]}"
    java(client, "send", dev.namesrv, t, 2)
    got = java(client, "dlq", dev.namesrv, group, t, 2, 60)
    assert sorted((m["body"], m["reconsumeTimes"]) for m in got) == \
        [("m-0", "0"), ("m-0", "1"), ("m-1", "0"), ("m-1", "1")]
    # (at least once: a client that misses the send-back's answer sends it again)
    assert set(until_read(dev.namesrv, f"%DLQ%{group}", 2)) == {"m-0", "m-1"}


@pytest.mark.parametrize("client", POMS)
def test_an_sql92_selector_gets_only_what_matches(dev, client):
    t = topic(dev, f"JSql{client[0]}")
    java(client, "send", dev.namesrv, t, 10)
    got = java(client, "sql", dev.namesrv, f"j-sql-{client[0]}", t,
               "TAGS = 'even' AND n BETWEEN 3 AND 8", 3, 60)
    assert sorted(m["body"] for m in got) == ["m-4", "m-6", "m-8"]


@pytest.mark.parametrize("client", POMS)
def test_lite_pull_assign_seek_and_commit(dev, client):
    t, group = topic(dev, f"JAssign{client[0]}", queues=1), f"j-assign-{client[0]}"
    java(client, "send", dev.namesrv, t, 5)
    out = java(client, "assign", dev.namesrv, group, t, 2)
    assert [m["body"] for m in out if "body" in m] == ["m-2", "m-3", "m-4"]
    assert out[-1] == {"committed": "5"}

    async def offset():
        async with Admin(dev.namesrv) as a:
            progress = await a.consumer_progress(group)
        return [q for q in progress if q.get("queueId") == 0]
    assert [q["consumerOffset"] for q in asyncio.run(offset())] == [5]  # on the broker


@pytest.mark.parametrize("client", POMS)
def test_pull_consumer_reads_every_queue(dev, client):
    t = topic(dev, f"JPull{client[0]}")
    java(client, "send", dev.namesrv, t, 5)
    got = java(client, "pull", dev.namesrv, f"j-pull-{client[0]}", t)
    assert [m["body"] for m in got] == [f"m-{i}" for i in range(5)]


@pytest.mark.parametrize("client", POMS)
def test_a_timer_message_is_delivered_when_due(dev, client):
    t = topic(dev, f"JTimer{client[0]}")
    due = int(java(client, "timer", dev.namesrv, t, 3000)[0]["due"])
    assert until_read(dev.namesrv, t, 1, timeout=30) == ["timer"]
    assert time.time() * 1000 >= due - 20  # (timers run in 10 ms slots)
