"""A data pipeline on ledgermq and Spark: JSON events in a topic -> parse -> per-action
counts and sums over 10-second event-time windows -> results to another topic (as JSON)
and to Parquet files. Exactly once end to end: offsets in the checkpoint, the sink's
deterministic keys deduplicated by the broker.

    make run        # in another shell: a broker on 127.0.0.1:9876
    .venv/bin/python examples/spark_pipeline.py --events 20000
    spark-submit --master spark://HOST:7077 --py-files ledgermq.zip \
        examples/spark_pipeline.py --namesrv HOST:9876 --work /shared/dir   # a cluster

It produces `--events` random events (unless --no-produce), then runs the query with
availableNow (it stops once it has caught up) and prints what it wrote. Run it again and
it picks up from its checkpoint.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ACTIONS = ("view", "click", "buy", "share")
WINDOW = "10 seconds"


async def produce_events(namesrv: str, topic: str, n: int, start_ms: int, seed: int = 7) -> None:
    """n events spread over n/100 seconds of event time, then one far later (it moves
    the watermark past every window, so the last windows are emitted too)."""
    from ledgermq import Message, Producer
    rng = random.Random(seed)
    async with Producer("pipeline-events", namesrv) as p:
        batch = []
        for i in range(n + 1):
            ts = start_ms + (i * 10 if i < n else n * 10 + 120_000)
            batch.append(Message(topic, json.dumps({
                "user": f"u{rng.randrange(1000)}", "action": rng.choice(ACTIONS),
                "amount": round(rng.uniform(1, 100), 2), "ts": ts}).encode(), tags="event"))
            if len(batch) == 500 or i == n:
                await p.send_batch(batch)
                batch = []


def build_query(spark, namesrv: str, source: str, sink_topic: str, parquet_dir: str,
                checkpoint_dir: str, max_per_trigger: int = 5000):
    """The streaming query; returns (topic query, parquet query), both started."""
    from pyspark.sql import functions as F
    events = (spark.readStream.format("ledgermq").option("namesrv", namesrv)
              .option("topic", source).option("maxMessagesPerTrigger", max_per_trigger)
              .option("consumerGroup", "pipeline").load()
              .select(F.from_json(F.col("body").cast("string"),
                                  "user string, action string, amount double, ts long")
                      .alias("e"))
              .select("e.*")
              .withColumn("event_time", F.timestamp_millis("ts"))
              .withWatermark("event_time", "10 seconds"))
    stats = (events.groupBy(F.window("event_time", WINDOW).alias("w"), "action")
             .agg(F.count("*").alias("events"), F.round(F.sum("amount"), 2).alias("amount"))
             .select(F.col("w.start").alias("window_start"), "action", "events", "amount"))
    to_topic = (stats.select(F.to_json(F.struct("*")).alias("body"),
                             F.col("action").alias("tags"))
                .writeStream.format("ledgermq").option("namesrv", namesrv)
                .option("topic", sink_topic).outputMode("append")
                .option("checkpointLocation", f"{checkpoint_dir}/topic")
                .trigger(availableNow=True).start())
    to_files = (stats.writeStream.format("parquet").option("path", parquet_dir)
                .option("checkpointLocation", f"{checkpoint_dir}/parquet")
                .outputMode("append").trigger(availableNow=True).start())
    return to_topic, to_files


def spark_session(master: str | None = None):
    """`master` if given; else the one spark-submit was given (it starts this script with
    PYSPARK_GATEWAY_PORT set and its --master in the conf); else local[2]."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession
    builder = SparkSession.builder
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[2]")
    spark = (builder.appName("ledgermq-pipeline")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    # registered, not found by name: a source Spark finds by name reaches the executors
    # with the driver's environment only, not with the --py-files a cluster ships
    from ledgermq.spark import register
    register(spark)
    return spark


def run(spark, namesrv: str, work: Path, events: int, source: str = "Events",
        sink_topic: str = "EventStats") -> dict:
    if events:
        asyncio.run(produce_events(namesrv, source, events, int(time.time() * 1000)))
    t0 = time.perf_counter()
    queries = build_query(spark, namesrv, source, sink_topic, str(work / "parquet"),
                          str(work / "checkpoint"))
    for q in queries:
        q.awaitTermination()
        if q.exception():
            raise RuntimeError(f"query failed: {q.exception()}")
    files = spark.read.parquet(str(work / "parquet"))
    topic = spark.read.format("ledgermq").option("namesrv", namesrv).option(
        "topic", sink_topic).load()
    return {"events": events, "seconds": round(time.perf_counter() - t0, 1),
            "windows_in_parquet": files.count(), "windows_in_topic": topic.count(),
            "events_counted": files.agg({"events": "sum"}).collect()[0][0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--namesrv", default="127.0.0.1:9876")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--no-produce", action="store_true")
    ap.add_argument("--work", type=Path, default=None, help="parquet + checkpoint directory "
                    "(on a cluster: a path every executor and the driver share)")
    ap.add_argument("--master", default=None, help="Spark master URL (default: spark-submit's "
                    "--master, else local[2])")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ledgermq-pipeline-"))
    spark = spark_session(args.master)
    try:
        out = run(spark, args.namesrv, work, 0 if args.no_produce else args.events)
        print(json.dumps({**out, "work": str(work)}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
