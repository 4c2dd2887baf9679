"""The broker's Prometheus metrics, with RocketMQ 5's names where one exists
(rocketmq_messages_in_total, rocketmq_throughput_in_total, rocketmq_messages_out_total,
rocketmq_throughput_out_total, rocketmq_consumer_lag_messages, rocketmq_storage_size) and
ledgermq's own for replication (ledgermq_*, from the mode: the broker never asks which
mode it is in).

Counting is per request (a batch of 100 is one addition of 100) into plain dicts; every
figure is turned into Prometheus families only when scraped, by a collector reading the
broker's state on its own event loop (no thread reads it while it changes). Served over
HTTP on `metricsPort` by `metrics_http.serve` on the broker's loop."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..metrics_http import gauge

if TYPE_CHECKING:
    from .broker import Broker


class BrokerStats:
    """What the request paths count (cheap: one dict update per request)."""

    def __init__(self) -> None:
        self.in_msgs: dict[str, int] = defaultdict(int)
        self.in_bytes: dict[str, int] = defaultdict(int)
        self.out_msgs: dict[tuple[str, str], int] = defaultdict(int)
        self.out_bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.acl_denied: dict[str, int] = defaultdict(int)  # by request code

    def put(self, topic: str, count: int, size: int) -> None:
        self.in_msgs[topic] += count
        self.in_bytes[topic] += size

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
        for name, doc, labels, value in b.mode.metrics():
            yield gauge(name, doc, base + list(labels), [cluster, node, *labels.values()],
                         value)


def registry_for(broker: "Broker") -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BrokerCollector(broker))
    return reg
