"""The Spark data source against the ceiling of PySpark's Python data source path, and the
sink against the Python client, in one run (JSON rows):

    python bench/spark_bench.py [--messages 1000000]

Read: a streaming query (availableNow) of every message of a topic into
`groupBy(queue_id).count()`, rows/s; beside a synthetic in-memory Python data source that
yields the same rows (same schema, 100-byte bodies, same partitioning) as Arrow batches.
Target >= 0.8x (best of two runs each, alternating). Sink: rows/s of `df.write.format("ledgermq")`; beside the Python client's
batch-send rate measured here. Target >= 0.5x. local[2]: Spark, the broker and the client
share the 2 cores. The broker allows pulls of 16,384 messages (pullBatchMaxMessages) and
the reader asks for them (pullBatchSize).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.spark_pipeline import spark_session  # noqa: E402
from ledgermq import Message, Producer  # noqa: E402
from tests.dev_process import DevProcess  # noqa: E402

PAYLOAD = b"x" * 100
QUEUES = 4


async def client_batch_send(namesrv: str, topic: str, n: int, size: int = 1000) -> float:
    """msgs/s of the Python client sending batches of `size` (10 in flight)."""
    async with Producer("bench-fill", namesrv) as p:
        await p.send(Message(topic, PAYLOAD))
        t0 = time.perf_counter()
        pending = []
        for i in range(0, n, size):
            pending.append(asyncio.ensure_future(p.send_batch([Message(topic, PAYLOAD)] * size)))
            if len(pending) >= 10:
                await pending.pop(0)
        await asyncio.gather(*pending)
        return n / (time.perf_counter() - t0)


def synthetic_source(rows_per_partition: int):
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from ledgermq.spark.arrow import ARROW_SCHEMA, SCHEMA_DDL

    class Part(InputPartition):
        def __init__(self, qid):
            super().__init__(qid)
            self.qid = qid

    class Reader(DataSourceStreamReader):
        def initialOffset(self):
            return {"done": 0}

        def latestOffset(self, start, limit):
            return {"done": 1}

        def partitions(self, start, end):
            return [Part(q) for q in range(QUEUES)] if start["done"] == 0 else []

        def read(self, p):
            import pyarrow as pa
            n = 4096
            for lo in range(0, rows_per_partition, n):
                k = min(n, rows_per_partition - lo)
                ts = pa.array([1_700_000_000_000_000] * k, pa.int64()).cast(
                    pa.timestamp("us", tz="UTC"))
                yield pa.RecordBatch.from_arrays([
                    pa.array(["Bench"] * k), pa.array(["broker-a"] * k),
                    pa.array([p.qid] * k, pa.int32()), pa.array(range(lo, lo + k), pa.int64()),
                    pa.array([f"id{i}" for i in range(lo, lo + k)]), pa.array([None] * k, pa.string()),
                    pa.array([None] * k, pa.string()), pa.array([PAYLOAD] * k, pa.binary()),
                    ts, ts, pa.array([[("UNIQ_KEY", "x")]] * k, pa.map_(pa.string(), pa.string())),
                ], schema=ARROW_SCHEMA)

    class Synthetic(DataSource):
        @classmethod
        def name(cls):
            return "synthetic_ceiling"

        def schema(self):
            return SCHEMA_DDL

        def streamReader(self, schema):
            return Reader()
    return Synthetic


def count_by_queue(spark, fmt: str, options: dict, work: Path) -> tuple[float, int]:
    r = spark.readStream.format(fmt)
    for k, v in options.items():
        r = r.option(k, v)
    t0 = time.perf_counter()
    q = (r.load().groupBy("queue_id").count().writeStream.format("memory")
         .queryName(f"q_{fmt}_{int(t0)}").outputMode("complete")
         .option("checkpointLocation", str(work / f"cp-{fmt}"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    secs = time.perf_counter() - t0
    total = spark.sql(f"select sum(`count`) from q_{fmt}_{int(t0)}").collect()[0][0]
    return secs, total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="ledgermq-spark-bench-") as tmp:
        work = Path(tmp)
        # RocketMQ's default key index size: the sink's dedup looks keys up in it
        dev = DevProcess(work / "broker", {"mappedFileSizeCommitLog": str(1 << 30),
                                           "defaultTopicQueueNums": str(QUEUES),
                                           "maxHashSlotNum": "5000000",
                                           "maxIndexNum": "20000000",
                                           "pullBatchMaxMessages": "16384"}).start()
        try:
            asyncio.run(client_batch_send(dev.namesrv, "Warm", 1000))
            client_rate = asyncio.run(client_batch_send(dev.namesrv, "Bench", n))
            print(json.dumps({"bench": "spark", "workload": "python client batch send "
                              "(the sink's anchor)", "msgs": n,
                              "msgs_per_s": round(client_rate)}), flush=True)
            spark = spark_session()
            try:
                spark.dataSource.register(synthetic_source((n + 1) // QUEUES))
                # warm up: the first queries pay for starting Python workers
                count_by_queue(spark, "ledgermq", {"namesrv": dev.namesrv, "topic": "Warm"},
                               work / "warm")
                count_by_queue(spark, "synthetic_ceiling", {}, work / "warm")
                # best of two, alternating, for both: this shared VM is noisy
                runs = {"ceiling": [], "ours": []}
                opts = {"namesrv": dev.namesrv, "topic": "Bench", "includeProperties": "false",
                        "pullBatchSize": "16384"}
                for k in range(2):
                    runs["ceiling"].append(count_by_queue(spark, "synthetic_ceiling", {},
                                                          work / f"c{k}"))
                    runs["ours"].append(count_by_queue(spark, "ledgermq", opts, work / f"o{k}"))
                secs, total = min(runs["ceiling"])
                ceiling = total / secs
                print(json.dumps({"bench": "spark", "workload": "synthetic Python source -> "
                                  "groupBy(queue_id).count() (ceiling)", "rows": total,
                                  "secs": round(secs, 2), "rows_per_s": round(ceiling),
                                  "runs": 2, "best": True}),
                      flush=True)
                secs, total = min(runs["ours"])
                ours = total / secs
                print(json.dumps({"bench": "spark", "workload": "ledgermq readStream "
                                  "availableNow -> groupBy(queue_id).count()", "rows": total,
                                  "secs": round(secs, 2), "rows_per_s": round(ours),
                                  "ceiling_rows_per_s": round(ceiling),
                                  "ratio": round(ours / ceiling, 2), "target": ">= 0.8x"}),
                      flush=True)
                m = n
                df = spark.range(m).selectExpr("cast(repeat('x', 100) as binary) as body")
                df.count()
                spark.range(1000).selectExpr("cast(id as string) as body").write.format(
                    "ledgermq").option("namesrv", dev.namesrv).option(
                    "topic", "WarmSink").mode("append").save()  # Python workers up
                t0 = time.perf_counter()
                df.write.format("ledgermq").option("namesrv", dev.namesrv).option(
                    "topic", "BenchSink").mode("append").save()
                rate = m / (time.perf_counter() - t0)
                print(json.dumps({"bench": "spark", "workload": "df.write.format('ledgermq')",
                                  "rows": m, "rows_per_s": round(rate),
                                  "client_msgs_per_s": round(client_rate),
                                  "ratio": round(rate / client_rate, 2),
                                  "target": ">= 0.5x"}), flush=True)
            finally:
                spark.stop()
        finally:
            dev.stop()


if __name__ == "__main__":
    main()
