"""Histograms cheap enough for a request path: bucket counts per key in plain lists.

An observation is one bisect over the bucket bounds and two additions (no lock, no object
per observation, no Prometheus client call); the counts become a Prometheus histogram only
when scraped (`metrics.serving.histogram_family`). A request is one observation however many
messages it carries (`count` adds a batch's messages to one bucket at once). Keys are
ints or strings rather than tuples where the path is hot (no allocation, a cheap hash):
the collector turns a key into label values. Counts from
another thread (the flush thread) are plain list additions under the GIL: a scrape may see
one observation's count without its sum, never a torn number.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Hashable, Iterable

# RocketMQ 5's buckets for rocketmq_rpc_latency (ms) and rocketmq_message_size (bytes)
RPC_LATENCY_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
MESSAGE_SIZE_BYTES = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
# an fsync of the commit log: from page-cache fast to a stalled disk
FLUSH_LATENCY_MS = (0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 500, 1000)


class Histogram:
    """Observations by key: counts per bucket (the last one past every bound), then their
    sum, in one list per key."""

    __slots__ = ("bounds", "series")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(bounds)
        self.series: dict[Hashable, list[float]] = {}

    def observe(self, key: Hashable, value: float, count: int = 1) -> None:
        s = self.series.get(key) or self.new(key)
        s[bisect_left(self.bounds, value)] += count
        s[-1] += value * count

    def new(self, key: Hashable) -> list[float]:
        """The (zeroed) counts of `key`: for callers that inline `observe` on a hot path."""
        s = self.series[key] = [0] * (len(self.bounds) + 1) + [0.0]
        return s
