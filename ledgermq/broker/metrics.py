"""The broker's Prometheus metrics, with RocketMQ 5's names where one exists
(rocketmq_messages_in_total, rocketmq_throughput_in_total, rocketmq_messages_out_total,
rocketmq_throughput_out_total, rocketmq_message_size, rocketmq_rpc_latency,
rocketmq_consumer_lag_messages, rocketmq_storage_size) and ledgermq's own for the store's
flushes and for replication (ledgermq_*, from the mode: the broker never asks which mode it
is in; per-replica lag from replica_lag.py).

Counting is per request (a batch of 100 is one addition of 100) into plain dicts and
histogram.Histogram lists; every figure is turned into Prometheus families only when
scraped, by a collector reading the broker's state on its own event loop (no thread reads
it while it changes). Served over HTTP on `metricsPort` by `metrics.serving.serve` on the
broker's loop."""
from __future__ import annotations

import functools
from bisect import bisect_left
from collections import defaultdict
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Iterable, Iterator, cast

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..metrics.histogram import MESSAGE_SIZE_BYTES, RPC_LATENCY_MS, Histogram
from ..metrics.serving import gauge, histogram_family
from ..remoting import RequestCode, ResponseCode
from .replica_lag import lag_rows
from .request_timing import rpc_codes

if TYPE_CHECKING:
    from .broker import Broker
    from .modes.protocol import Metric as ModeMetric


class BrokerStats:
    """What the request paths count (cheap: one dict update per request). `histograms`:
    record what is written (while metrics are served; nothing reads it otherwise)."""

    def __init__(self, histograms: bool = False) -> None:
        self.out_msgs: dict[tuple[str, str], int] = defaultdict(int)
        self.out_bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.acl_denied: dict[int | str, int] = defaultdict(int)  # by request code
        # by protocol, then by request_timing.rpc_key(request code, response code)
        self.rpc = {"remoting": Histogram(RPC_LATENCY_MS), "grpc": Histogram(RPC_LATENCY_MS)}
        # by topic: each message's stored size (a batch's at their mean); its count and sum
        # are also the messages and bytes written
        self.sizes: Histogram | None = \
            Histogram(MESSAGE_SIZE_BYTES) if histograms else None

    def put(self, topic: str, count: int, size: int) -> None:
        sizes = self.sizes
        if sizes is not None and count:
            # (observe, inlined; histogram.py says its keys are tuples: these are topics)
            s = sizes.series.get(topic) or sizes.new(topic)
            s[bisect_left(sizes.bounds, size / count)] += count
            s[-1] += size

    def written(self) -> tuple[dict[str, int], dict[str, int]]:
        """(messages, bytes) written, by topic."""
        series = list(cast("dict[str, list[Any]]", self.sizes.series).items()) \
            if self.sizes is not None else []
        return {t: sum(s[:-1]) for t, s in series}, {t: int(s[-1]) for t, s in series}

    def pulled(self, topic: str, group: str, count: int, size: int) -> None:
        self.out_msgs[topic, group] += count
        self.out_bytes[topic, group] += size


class BrokerCollector(Collector):
    def __init__(self, broker: "Broker"):
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        b, stats = self.broker, self.broker.stats
        cluster, node = b.config.brokerClusterName, b.config.brokerName
        base = ["cluster", "node_id"]

        def counter(name: str, doc: str, labels: list[str],
                    rows: dict[str, int] | dict[tuple[str, str], int]) -> CounterMetricFamily:
            fam = CounterMetricFamily(name, doc, labels=base + labels)
            for key, v in rows.items():
                fam.add_metric([cluster, node, *(key if isinstance(key, tuple) else (key,))], v)
            return fam
        in_msgs, in_bytes = stats.written()
        yield counter("rocketmq_messages_in", "Messages written by producers, by topic.",
                      ["topic"], in_msgs)
        yield counter("rocketmq_throughput_in", "Bytes written by producers, by topic.",
                      ["topic"], in_bytes)
        yield counter("rocketmq_messages_out", "Messages pulled by consumers.",
                      ["topic", "consumer_group"], stats.out_msgs)
        yield counter("rocketmq_throughput_out", "Bytes pulled by consumers.",
                      ["topic", "consumer_group"], stats.out_bytes)
        yield counter("ledgermq_acl_denied", "Requests refused by the ACL (unsigned, wrong "
                      "signature, no permission), by request code.", ["request_code"],
                      {str(k): v for k, v in stats.acl_denied.items()})
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages",
                                "Messages stored but not yet committed by the group, by queue.",
                                labels=base + ["topic", "consumer_group", "queue_id"])
        for key, queues in list(b.offsets.table.items()):
            topic, group = key.split("@", 1)
            for qid, off in queues.items():
                behind = b.store.max_offset_in_queue(topic, qid) - off
                lag.add_metric([cluster, node, topic, group, str(qid)], max(0, behind))
        yield lag
        cl = b.store.commitlog
        yield gauge("rocketmq_storage_size", "Bytes the commit log holds.", base,
                     [cluster, node], cl.max_offset - cl.min_offset)
        yield histogram_family("rocketmq_rpc_latency", "Milliseconds from a request's arrival "
                               "to its response (a send's includes waiting for replication).",
                               base, [cluster, node],
                               ["protocol_type", "request_code", "response_code"],
                               *((hist, functools.partial(_rpc_labels, protocol))
                                 for protocol, hist in stats.rpc.items()))
        if stats.sizes is not None:
            yield histogram_family("rocketmq_message_size", "Stored bytes per message written "
                                   "(a batch's at their mean), by topic.", base, [cluster, node],
                                   ["topic"], (stats.sizes, lambda topic: [topic]))
        yield histogram_family("ledgermq_store_flush_latency", "Milliseconds per commit-log "
                               "flush (fsync) that made more of the log durable.", base,
                               [cluster, node], [], (b.store.flush_latency, lambda _: []))
        rows = b.mode.metrics()
        if b.log_bounds is not None:
            rows += lag_rows(b.log_bounds, b.mode.replica_offsets())
        yield from mode_families(rows, base, [cluster, node])


def mode_families(rows: Iterable[ModeMetric], base: list[str], values: list[str]
                  ) -> Iterator[Metric]:
    """The mode's rows (name, help, labels, value) as families, one per name; a name ending
    in _total is a counter."""
    fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    for name, doc, labels, value in rows:
        fam = fams.get(name)
        if fam is None:
            kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
            fam = fams[name] = kind(name, doc, labels=base + list(labels))
        fam.add_metric(values + [str(v) for v in labels.values()], value)
    yield from fams.values()


def _code_name(enum: type[IntEnum], code: int) -> str:
    """RocketMQ's label value: the code's constant name in lower case."""
    try:
        return enum(code).name.lower()
    except ValueError:
        return str(code)


def _rpc_labels(protocol: str, key: int) -> tuple[str, str, str]:
    request, response = rpc_codes(key)
    return protocol, _code_name(RequestCode, request), _code_name(ResponseCode, response)


def registry_for(broker: "Broker") -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(broker))
    return reg
