"""The ledgermq PySpark data source against a real broker in local[2] Spark: batch reads
with ending offsets, a streaming read stopped and restarted from its checkpoint (every
message once, in queue order), the sink exactly once across a task retry and a query that
dies mid-batch, and clear errors for bad options."""
import asyncio
import json

import pytest

from ledgermq import Message, Producer

from ..integration.load import read_all


def produce(namesrv, topic, bodies, batch=50):
    async def go():
        async with Producer("spark-test", namesrv) as p:
            for i in range(0, len(bodies), batch):
                await p.send_batch([Message(topic, b, keys=b.decode()) for b in bodies[i:i + batch]])
    asyncio.run(go())


def read_topic(namesrv, topic):
    """{queue_id: [bodies in queue order]}, straight from the broker."""
    return asyncio.run(read_all(namesrv, topic=topic))


def reader(spark, broker, topic, stream=False, **opts):
    r = (spark.readStream if stream else spark.read).format("ledgermq")
    r = r.option("namesrv", broker.namesrv).option("topic", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_with_ending_offsets(spark, broker):
    produce(broker.namesrv, "SparkBatch", [f"b-{i}".encode() for i in range(400)])
    stored = read_topic(broker.namesrv, "SparkBatch")
    df = reader(spark, broker, "SparkBatch")
    assert df.count() == 400
    rows = df.select("queue_id", "queue_offset", "body", "keys").collect()
    by_queue = {}
    for r in sorted(rows, key=lambda r: (r.queue_id, r.queue_offset)):
        by_queue.setdefault(r.queue_id, []).append(bytes(r.body))
        assert r.keys == bytes(r.body).decode()
    assert by_queue == stored
    ending = {"SparkBatch": {"broker-a:0": 10, "broker-a:1": 5}}
    part = reader(spark, broker, "SparkBatch", endingOffsets=json.dumps(ending),
                  startingOffsets=json.dumps({"SparkBatch": {"broker-a:0": 2}}))
    got = sorted((r.queue_id, r.queue_offset) for r in part.select("queue_id", "queue_offset")
                 .collect() if r.queue_id in (0, 1))
    assert got == [(0, o) for o in range(2, 10)] + [(1, o) for o in range(5)]


def _run_stream(spark, broker, topic, checkpoint, sink_dir, **opts):
    q = (reader(spark, broker, topic, stream=True, **opts)
         .select("queue_id", "queue_offset", "body").writeStream.format("parquet")
         .option("path", str(sink_dir)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()


def test_stream_restarts_from_its_checkpoint_exactly_once(spark, broker, tmp_path):
    topic = "SparkStream"
    produce(broker.namesrv, topic, [f"s1-{i}".encode() for i in range(300)])
    cp, out = tmp_path / "cp", tmp_path / "out"
    _run_stream(spark, broker, topic, cp, out, maxMessagesPerTrigger="100",
                consumerGroup="spark-stream")
    produce(broker.namesrv, topic, [f"s2-{i}".encode() for i in range(200)])
    _run_stream(spark, broker, topic, cp, out, maxMessagesPerTrigger="100",
                consumerGroup="spark-stream")
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 500  # every message exactly once across the restart
    got = {}
    for r in sorted(rows, key=lambda r: (r.queue_id, r.queue_offset)):
        got.setdefault(r.queue_id, []).append(bytes(r.body))
    assert got == read_topic(broker.namesrv, topic)  # the queues' order is kept


def test_sink_writes_each_row_once_across_a_retried_task(spark, broker, tmp_path):
    marker = tmp_path / "failed-once"
    from pyspark.sql.functions import col, udf

    @udf("string")
    def fail_first_attempt(v):
        # the task dies after its first rows went out; Spark runs it again
        if v == "row-150" and not marker.exists():
            marker.write_text("x")
            raise RuntimeError("injected task failure")
        return v
    df = spark.range(300).repartition(1).selectExpr("concat('row-', id) as v") \
        .select(fail_first_attempt(col("v")).alias("body"))
    df.write.format("ledgermq").option("namesrv", broker.namesrv).option(
        "topic", "SparkSink").option("batchSize", "50").mode("append").save()
    assert marker.exists()
    bodies = [b for q in read_topic(broker.namesrv, "SparkSink").values() for b in q]
    assert sorted(bodies) == sorted(f"row-{i}".encode() for i in range(300))


def test_stream_sink_exactly_once_when_the_query_dies_mid_batch(spark, broker, tmp_path):
    src, dst = "SparkPipeIn", "SparkPipeOut"
    produce(broker.namesrv, src, [f"p-{i}".encode() for i in range(200)])
    marker = tmp_path / "died"
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def die_once(body):
        # both attempts of the task fail (local[2, 2] tries twice): the query dies, with
        # the rows its other tasks and its failed attempts sent already on the broker
        if body == b"p-120" and len(marker.read_text() if marker.exists() else "") < 2:
            marker.write_text((marker.read_text() if marker.exists() else "") + "x")
            raise RuntimeError("the query dies in the middle of a batch")
        return body

    def run():
        q = (reader(spark, broker, src, stream=True).select(die_once(col("body")).alias("body"))
             .writeStream.format("ledgermq").option("namesrv", broker.namesrv)
             .option("topic", dst).option("batchSize", "20")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(120)
        except Exception:  # noqa: BLE001 - the injected death
            pass
        return q.exception()
    first = run()
    assert first is not None and marker.exists()  # it died mid-batch...
    partial = [b for q in read_topic(broker.namesrv, dst).values() for b in q]
    assert 0 < len(partial) < 200  # ...with part of the batch already on the broker
    assert run() is None  # restarted from its checkpoint: the batch runs again
    bodies = [b for q in read_topic(broker.namesrv, dst).values() for b in q]
    assert sorted(bodies) == sorted(f"p-{i}".encode() for i in range(200))


@pytest.mark.parametrize("opts,message", [
    ({"topic": "T", "startingOffsets": "yesterday"}, "startingOffsets"),
    ({"topic": "T", "maxMessagesPerTrigger": "0"}, "maxmessagespertrigger"),
    ({"topic": "T", "colour": "blue"}, "unknown ledgermq read option"),
    ({}, "topic is required"),
])
def test_bad_options_get_clear_errors(spark, broker, opts, message):
    r = spark.read.format("ledgermq").option("namesrv", broker.namesrv)
    for k, v in opts.items():
        r = r.option(k, v)
    with pytest.raises(Exception) as e:
        r.load().count()
    assert message.lower() in str(e.value).lower()


def test_explicit_register_works_beside_discovery(spark, broker):
    import ledgermq.spark
    produce(broker.namesrv, "SparkRegistered", [b"one", b"two"])
    ledgermq.spark.register(spark)
    assert reader(spark, broker, "SparkRegistered").count() == 2


def test_the_example_pipeline_runs_end_to_end(spark, broker, tmp_path):
    from examples.spark_pipeline import run
    out = run(spark, broker.namesrv, tmp_path, events=2000, source="PipeEvents",
              sink_topic="PipeStats")
    # 2,000 events over 20 s of event time, all in closed windows; the one far-later
    # event only moves the watermark (its window is still open)
    assert out["events_counted"] == 2000
    assert out["windows_in_parquet"] == out["windows_in_topic"] > 0
    again = run(spark, broker.namesrv, tmp_path, events=0, source="PipeEvents",
                sink_topic="PipeStats")
    assert again["windows_in_topic"] == out["windows_in_topic"]  # nothing twice
