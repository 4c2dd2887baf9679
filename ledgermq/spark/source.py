"""`spark.read / readStream / write / writeStream .format("ledgermq")`.

Reads: one input partition per message queue and offset range, pulled in large batches
and yielded as Arrow record batches. Streaming offsets are {topic: {"broker:queue":
offset}}; Spark keeps them in its checkpoint, so a restarted query resumes exactly where
it stopped and a replayed batch reads the same messages again.

Writes (exactly once per row): every row gets a deterministic UNIQ_KEY — the write job's
id (a batch write's uuid, or a streaming query's id and batch id), the task's partition
and the row's index in it — and is sent with LMQ_DEDUP=1, so a broker drops a row whose
key it already stores. A task retried, or a micro-batch re-run after a crash, sends the
same keys again: what made it the first time is not stored twice.
"""
from __future__ import annotations

import uuid
from typing import Iterator

from pyspark.sql.datasource import (
    DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter,
    DataSourceStreamReader, InputPartition, WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow,
)

from .arrow import SCHEMA_DDL, raw_to_record_batch
from .options import OptionError, ReadOptions, WriteOptions
from .queues import EARLIEST, LATEST, QueuesUnavailable, Topics, parse_key, pull_range
from .sink import write_batches

MAX_PARTITION_MESSAGES = 1_000_000  # a bigger range is split across tasks


class QueueRange(InputPartition):
    def __init__(self, topic: str, key: str, start: int, end: int):
        super().__init__((topic, key, start, end))
        self.topic, self.key, self.start, self.end = topic, key, start, end


def plan(start: dict, end: dict) -> list[QueueRange]:
    out = []
    for topic, qs in sorted(end.items()):
        for key, hi in sorted(qs.items()):
            lo = start.get(topic, {}).get(key, 0)
            while lo < hi:
                stop = min(hi, lo + MAX_PARTITION_MESSAGES)
                out.append(QueueRange(topic, key, lo, stop))
                lo = stop
    return out


def read_range(opts: ReadOptions, p: QueueRange):
    mq = parse_key(p.topic, p.key)
    for raw in pull_range(opts.namesrv, mq, p.start, p.end, opts.pull_batch):
        batch = raw_to_record_batch(p.topic, mq.broker_name, mq.queue_id, raw, p.end,
                                    opts.include_properties, mq)
        if batch is not None:
            yield batch


class _Driver:
    """Driver-side state of a reader: a client for offsets (never pickled to tasks)."""

    def __init__(self, options):
        self.opts = ReadOptions.parse(options)
        self._topics: Topics | None = None

    @property
    def topics(self) -> Topics:
        if self._topics is None:
            self._topics = Topics(self.opts.namesrv)
        return self._topics

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_topics"] = None
        return d

    def current(self, known: dict | None = None) -> tuple[dict, dict]:
        """{topic: {queue: min}}, {topic: {queue: max}} for every queue of the topics that
        can be read now. A queue the route lists that does not answer, or one in `known`
        (offsets already read) the route no longer lists — its whole group is down — is
        unavailable: QueuesUnavailable, or (failOnUnavailable=false) left out, so the
        caller keeps it where it was."""
        lows, highs = {}, {}
        for topic in self.opts.topics:
            b, failed = self.topics.bounds(self.topics.queues(topic))
            self.check_available(topic, b, known, failed)
            lows[topic] = {k: lo for k, (lo, _) in b.items()}
            highs[topic] = {k: hi for k, (_, hi) in b.items()}
        return lows, highs

    def check_available(self, topic: str, have, known: dict | None,
                        failed: dict[str, str] | None = None) -> None:
        """QueuesUnavailable for the queues that `failed` to answer and those of `known`
        not in `have` (unless failOnUnavailable=false)."""
        failed = dict(failed or {})
        for key in (known or {}).get(topic, {}):
            if key not in have and key not in failed:
                failed[key] = "the route no longer lists it"
        if failed and self.opts.fail_on_unavailable:
            raise QueuesUnavailable(topic, failed)

    def resolve(self, spec, lows: dict, highs: dict, default: str) -> dict:
        """Offsets from earliest | latest | JSON (with -2/-1), for every current queue."""
        out = {}
        for topic in self.opts.topics:
            given = spec.get(topic, {}) if isinstance(spec, dict) else {}
            mode = spec if isinstance(spec, str) else default
            out[topic] = {}
            for key in highs[topic]:
                v = given.get(key, EARLIEST if mode == "earliest" else LATEST)
                v = lows[topic][key] if v == EARLIEST else highs[topic][key] if v == LATEST \
                    else max(lows[topic][key], min(v, highs[topic][key]))
                out[topic][key] = v
            unknown = set(given) - set(highs[topic])
            if unknown:
                raise OptionError(f"topic {topic} has no queue(s) {sorted(unknown)} "
                                  f"(it has {sorted(highs[topic])})")
        return out

    def starting(self) -> dict:
        lows, highs = self.current()
        if self.opts.starting_timestamp is not None:
            return {t: {k: self.topics.offset_at(parse_key(t, k), self.opts.starting_timestamp)
                        for k in highs[t]} for t in self.opts.topics}
        return self.resolve(self.opts.starting, lows, highs, "earliest")

    def stop(self) -> None:
        if self._topics is not None:
            self._topics.close()
            self._topics = None


def _named(*specs) -> dict:
    """{topic: {queue: offset}} of the queues JSON offset options name: they exist, so one
    the route lacks is unavailable, as for a stream."""
    out: dict = {}
    for spec in specs:
        if isinstance(spec, dict):
            for topic, qs in spec.items():
                out.setdefault(topic, {}).update(qs)
    return out


class LedgerMQBatchReader(DataSourceReader):
    def __init__(self, options):
        self.driver = _Driver(options)
        d = self.driver
        lows, highs = d.current(_named(d.opts.starting, d.opts.ending))
        self.start = d.starting()
        self.end = d.resolve(d.opts.ending, lows, highs, "latest")
        d.stop()

    def partitions(self):
        return plan(self.start, self.end)

    def read(self, partition: QueueRange):
        return read_range(self.driver.opts, partition)


class LedgerMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options):
        self.driver = _Driver(options)
        self.cap: dict | None = None  # availableNow: what existed when the query started

    def initialOffset(self) -> dict:
        return self.driver.starting()

    def getDefaultReadLimit(self):
        n = self.driver.opts.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.cap = self.driver.current()[1]

    def latestOffset(self, start: dict, limit) -> dict:
        if self.cap is None:
            highs = self.driver.current(start)[1]
        else:  # availableNow: what existed when it started, of the queues there then
            highs = self.cap
            for topic in self.driver.opts.topics:
                self.driver.check_available(topic, highs.get(topic, {}), start)
        lows = {t: {k: 0 for k in qs} for t, qs in highs.items()}  # a new queue: from 0
        end = {t: {k: max(start.get(t, {}).get(k, lows[t][k]), hi) for k, hi in qs.items()}
               for t, qs in highs.items()}
        for t, qs in start.items():  # never forget a queue we already read
            for k, v in qs.items():
                end.setdefault(t, {}).setdefault(k, v)
        if isinstance(limit, ReadMaxRows):
            end = _limit(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self):
        return self.driver.current()[1]

    def partitions(self, start: dict, end: dict):
        return plan(start, end)

    def read(self, partition: QueueRange):
        return read_range(self.driver.opts, partition)

    def commit(self, end: dict) -> None:
        if self.driver.opts.consumer_group:
            self.driver.topics.commit(self.driver.opts.consumer_group, end)

    def stop(self) -> None:
        self.driver.stop()


def _limit(start: dict, end: dict, budget: int) -> dict:
    """At most `budget` messages past `start`, shared by the queues in proportion to
    what each has waiting (every queue with something waiting moves)."""
    waiting = {(t, k): hi - start.get(t, {}).get(k, 0) for t, qs in end.items()
               for k, hi in qs.items()}
    total = sum(v for v in waiting.values() if v > 0)
    if total <= budget:
        return end
    out = {t: dict(qs) for t, qs in end.items()}
    left = budget
    for (t, k), n in sorted(waiting.items()):
        if n <= 0:
            continue
        take = min(n, max(1, budget * n // total), left)
        out[t][k] = start.get(t, {}).get(k, 0) + take
        left -= take
    return out


class _Sent(WriterCommitMessage):
    def __init__(self, rows: int):
        self.rows = rows


class LedgerMQBatchWriter(DataSourceArrowWriter):
    def __init__(self, options, schema):
        self.opts = WriteOptions.parse(options)
        _check_sink_schema(self.opts, schema)
        self.job = uuid.uuid4().hex  # the same in every retry of this write's tasks

    def write(self, batches: Iterator) -> _Sent:
        from pyspark import TaskContext
        return _Sent(write_batches(self.opts, batches, self.job, TaskContext.get()))


class LedgerMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema):
        self.opts = WriteOptions.parse(options)
        _check_sink_schema(self.opts, schema)

    def write(self, batches: Iterator) -> _Sent:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        # a re-run micro-batch (after a crash) has the same query id and batch id
        job = f"{ctx.getLocalProperty('sql.streaming.queryId')}-" \
              f"{ctx.getLocalProperty('streaming.sql.batchId')}"
        return _Sent(write_batches(self.opts, batches, job, ctx))

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass  # rows already sent stay; the re-run's dedup keeps them single


def _check_sink_schema(opts: WriteOptions, schema) -> None:
    names = {f.name for f in schema.fields}
    if "body" not in names:
        raise OptionError("a ledgermq sink needs a body column (binary or string)")
    if opts.topic is None and "topic" not in names:
        raise OptionError("a ledgermq sink needs the topic option or a topic column")
    allowed = {"body", "keys", "tags", "properties", "queue_id", "topic"}
    extra = sorted(names - allowed)
    if extra:
        raise OptionError(f"a ledgermq sink takes columns {sorted(allowed)}; not {extra}")


class LedgerMQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ledgermq"

    def schema(self):
        return SCHEMA_DDL

    def reader(self, schema):
        return LedgerMQBatchReader(self.options)

    def streamReader(self, schema):
        return LedgerMQStreamReader(self.options)

    def writer(self, schema, overwrite):
        return LedgerMQBatchWriter(self.options, schema)

    def streamWriter(self, schema, overwrite):
        return LedgerMQStreamWriter(self.options, schema)
