"""The broker's Prometheus metrics, with RocketMQ 5's names where one exists
(rocketmq_messages_in_total, rocketmq_throughput_in_total, rocketmq_messages_out_total,
rocketmq_throughput_out_total, rocketmq_message_size, rocketmq_rpc_latency,
rocketmq_consumer_lag_messages, rocketmq_storage_size) and ledgermq's own for the store's
flushes and for replication (ledgermq_*, from the mode: the broker never asks which mode it
is in; per-replica lag from replica_lag.py).

Counting is per request (a batch of 100 is one addition of 100) into plain dicts and
histogram.Histogram lists; every figure is turned into Prometheus families only when
scraped, by a collector reading the broker's state on its own event loop (no thread reads
it while it changes). Served over HTTP on `metricsPort` by `metrics_http.serve` on the
broker's loop."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..histogram import MESSAGE_SIZE_BYTES, RPC_LATENCY_MS, Histogram
from ..metrics_http import gauge, histogram_family
from ..remoting import RequestCode, ResponseCode
from .replica_lag import lag_rows

if TYPE_CHECKING:
    from .broker import Broker


class BrokerStats:
    """What the request paths count (cheap: one dict update per request). `histograms`:
    also record request latencies and message sizes (while metrics are served)."""

    def __init__(self, histograms: bool = False) -> None:
        self.in_msgs: dict[str, int] = defaultdict(int)
        self.in_bytes: dict[str, int] = defaultdict(int)
        self.out_msgs: dict[tuple[str, str], int] = defaultdict(int)
        self.out_bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.acl_denied: dict[str, int] = defaultdict(int)  # by request code
        self.rpc = Histogram(RPC_LATENCY_MS)  # (protocol, request code, response code)
        self.sizes = Histogram(MESSAGE_SIZE_BYTES) if histograms else None  # (topic,)

    def put(self, topic: str, count: int, size: int) -> None:
        self.in_msgs[topic] += count
        self.in_bytes[topic] += size
        if self.sizes is not None and count:  # a batch: its messages at their mean stored size
            self.sizes.observe((topic,), size / count, count)

    def pulled(self, topic: str, group: str, count: int, size: int) -> None:
        self.out_msgs[topic, group] += count
        self.out_bytes[topic, group] += size


class BrokerCollector(Collector):
    def __init__(self, broker: "Broker"):
        self.broker = broker

    def collect(self):
        b, stats = self.broker, self.broker.stats
        cluster, node = b.config.brokerClusterName, b.config.brokerName
        base = ["cluster", "node_id"]

        def counter(name, doc, labels, rows):
            fam = CounterMetricFamily(name, doc, labels=base + labels)
            for key, v in rows.items():
                fam.add_metric([cluster, node, *(key if isinstance(key, tuple) else (key,))], v)
            return fam
        yield counter("rocketmq_messages_in", "Messages written by producers, by topic.",
                      ["topic"], stats.in_msgs)
        yield counter("rocketmq_throughput_in", "Bytes written by producers, by topic.",
                      ["topic"], stats.in_bytes)
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
                               base, [cluster, node], stats.rpc,
                               ["protocol_type", "request_code", "response_code"], _rpc_labels)
        if stats.sizes is not None:
            yield histogram_family("rocketmq_message_size", "Stored bytes per message written "
                                   "(a batch's at their mean), by topic.", base, [cluster, node],
                                   stats.sizes, ["topic"])
        yield histogram_family("ledgermq_store_flush_latency", "Milliseconds per commit-log "
                               "flush (fsync) that made more of the log durable.", base,
                               [cluster, node], b.store.flush_latency, [])
        rows = b.mode.metrics()
        if b.log_bounds is not None:
            rows += lag_rows(b.log_bounds, b.mode.replica_offsets())
        yield from mode_families(rows, base, [cluster, node])


def mode_families(rows, base: list[str], values: list[str]):
    """The mode's rows (name, help, labels, value) as families, one per name; a name ending
    in _total is a counter."""
    fams: dict[str, object] = {}
    for name, doc, labels, value in rows:
        fam = fams.get(name)
        if fam is None:
            kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
            fam = fams[name] = kind(name, doc, labels=base + list(labels))
        fam.add_metric(values + [str(v) for v in labels.values()], value)
    yield from fams.values()


def _code_name(enum, code: int) -> str:
    """RocketMQ's label value: the code's constant name in lower case."""
    try:
        return enum(code).name.lower()
    except ValueError:
        return str(code)


def _rpc_labels(key: tuple) -> tuple:
    protocol, request, response = key
    return protocol, _code_name(RequestCode, request), _code_name(ResponseCode, response)


def registry_for(broker: "Broker") -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(broker))
    return reg
