"""The data source over a topic spread across two broker groups (and two name servers):
one input partition per queue whichever group holds it; a stream with one group down
fails naming its queues, or (failOnUnavailable=false) reads the others and waits for
them; the sink writes across the groups, each row once."""
import asyncio
import json
import signal

import pytest

from ledgermq import Message, Producer
from ledgermq.client.admin import Admin

from ..integration.test_groups import read_every_queue
from ..wait import wait_until


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    from ledgermq.localcluster.cluster import down, up
    d = tmp_path_factory.mktemp("spark-groups")
    state = up("async", 1, d, groups=2, namesrvs=2)
    state["dir"] = d
    yield state
    down(d)


def create(ns, topic, queues):
    async def go():
        async with Admin(ns) as a:
            return await a.update_topic(topic, read_queues=queues, write_queues=queues)
    assert len(asyncio.run(go())) == 2  # on both groups' masters


def produce(ns, topic, bodies):
    """Sent one by one, so they spread over every queue of both groups (round-robin)."""
    async def go():
        async with Producer("spark-groups", ns) as p:
            for b in bodies:
                assert (await p.send(Message(topic, b))).status.value == "SEND_OK"
    asyncio.run(go())


def stream(spark, ns, topic, cp, out, **opts):
    r = spark.readStream.format("ledgermq").option("namesrv", ns).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    q = (r.load().select("broker", "queue_id", "queue_offset", "body").writeStream
         .format("parquet").option("path", str(out)).option("checkpointLocation", str(cp))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    except Exception:  # noqa: BLE001 - reported by q.exception()
        pass
    return q.exception()


def bodies(spark, out):
    return sorted(bytes(r.body) for r in spark.read.parquet(str(out)).collect())


def test_batch_read_one_partition_per_queue_of_every_group(spark, groups):
    ns = groups["namesrv"]
    create(ns, "GroupsBatch", 3)
    sent = [f"g-{i}".encode() for i in range(120)]
    produce(ns, "GroupsBatch", sent)
    df = spark.read.format("ledgermq").option("namesrv", ns).option("topic", "GroupsBatch") \
        .load()
    assert df.rdd.getNumPartitions() == 6  # 3 queues on each of 2 groups
    rows = df.select("broker", "queue_id", "body").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(sent)
    assert {r.broker for r in rows} == {"broker-a", "broker-b"}


@pytest.mark.slow  # (make test-slow: the default run keeps near 15 minutes)
def test_a_stream_with_a_group_down_fails_naming_its_queues_or_waits(spark, groups, tmp_path):
    from ledgermq.localcluster.cluster import start, stop
    ns, d, topic = groups["namesrv"], groups["dir"], "GroupsStream"
    create(ns, topic, 2)
    first = [f"s1-{i}".encode() for i in range(40)]
    produce(ns, topic, first)
    strict, lenient = tmp_path / "strict", tmp_path / "lenient"
    assert stream(spark, ns, topic, strict / "cp", strict / "out") is None
    assert stream(spark, ns, topic, lenient / "cp", lenient / "out",
                  failOnUnavailable="false") is None
    assert bodies(spark, strict / "out") == bodies(spark, lenient / "out") == sorted(first)
    stop(d, "b-n0", signal.SIGKILL)
    try:
        def route_brokers():
            async def go():
                async with Admin(ns) as a:
                    return {q["brokerName"] for q in (await a.topic_route(topic))["queueDatas"]}
            return asyncio.run(go())
        wait_until(lambda: route_brokers() == {"broker-a"}, "broker-b gone from the route")
        second = [f"s2-{i}".encode() for i in range(30)]
        produce(ns, topic, second)  # all on broker-a
        err = stream(spark, ns, topic, strict / "cp", strict / "out")
        assert err is not None
        text = str(err)
        assert "broker-b:0, broker-b:1 unavailable" in text and "failOnUnavailable" in text
        ending = json.dumps({topic: {"broker-a:0": -1, "broker-b:0": -1}})
        with pytest.raises(Exception, match="queue.s. broker-b:0 unavailable"):
            spark.read.format("ledgermq").option("namesrv", ns).option("topic", topic) \
                .option("endingOffsets", ending).load().count()  # named, so known
        assert stream(spark, ns, topic, lenient / "cp", lenient / "out",
                      failOnUnavailable="false") is None
        assert bodies(spark, lenient / "out") == sorted(first + second)  # broker-a's, once
    finally:
        start(d, "b-n0")
    wait_until(lambda: route_brokers() == {"broker-a", "broker-b"}, "broker-b back")
    third = [f"s3-{i}".encode() for i in range(20)]
    produce(ns, topic, third)
    everything = sorted(first + second + third)
    assert stream(spark, ns, topic, lenient / "cp", lenient / "out",
                  failOnUnavailable="false") is None
    assert bodies(spark, lenient / "out") == everything  # broker-b's read from where it was
    assert stream(spark, ns, topic, strict / "cp", strict / "out") is None
    assert bodies(spark, strict / "out") == everything


def test_the_sink_writes_across_groups_each_row_once(spark, groups, tmp_path):
    ns = groups["namesrv"]
    create(ns, "GroupsSink", 4)
    marker = tmp_path / "failed-once"
    from pyspark.sql.functions import col, udf

    @udf("string")
    def fail_first_attempt(v):
        # a task dies after part of its batches went out (to both groups); Spark retries it
        if v == "row-250" and not marker.exists():
            marker.write_text("x")
            raise RuntimeError("injected task failure")
        return v
    df = spark.range(400).repartition(2).selectExpr("concat('row-', id) as v") \
        .select(fail_first_attempt(col("v")).alias("body"))
    df.write.format("ledgermq").option("namesrv", ns).option("topic", "GroupsSink") \
        .option("batchSize", "20").mode("append").save()
    assert marker.exists()
    stored = asyncio.run(read_every_queue(ns, "GroupsSink"))
    got = sorted(b for q in stored.values() for b in q)
    assert got == sorted(f"row-{i}".encode() for i in range(400))  # each row once
    per_group = {g: sum(len(q) for (b, _), q in stored.items() if b == g)
                 for g in ("broker-a", "broker-b")}
    assert min(per_group.values()) > 0, per_group
