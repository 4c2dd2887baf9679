"""The control node's figures for Prometheus, per broker group, read at scrape time from
the GroupControl cores it drives: epoch, master, consistent checkpoint, members, the
message cache (sends it acknowledged for a master whose checkpoint lagged), failovers, and
each broker's log end as its last heartbeat said."""
from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from .server import ControlNode

GROUP_GAUGES = (  # name, help, value of a GroupControl
    ("ledgermq_control_epoch", "The group's epoch (one more per failover).",
     lambda g: g.state.epoch),
    ("ledgermq_control_master_slot", "The master's slot (-1: none yet).",
     lambda g: -1 if g.state.master is None else g.state.master),
    ("ledgermq_control_checkpoint_offset", "The consistent checkpoint the master last "
     "reported (bytes).", lambda g: g.state.checkpoint),
    ("ledgermq_control_members", "Slaves the checkpoint spans.", lambda g: len(g.state.members)),
    ("ledgermq_control_promoting", "1 while a slave is being promoted.",
     lambda g: int(g.state.promoting is not None)),
    ("ledgermq_control_cached_messages", "Cached sends: stored on the master past the "
     "checkpoint and acknowledged because the control node holds them.", lambda g: len(g.cache)),
    ("ledgermq_control_cached_bytes", "Bytes of the cached sends.", lambda g: g.cache_bytes),
)


class ControlNodeCollector:
    def __init__(self, node: "ControlNode"):
        self.node = node

    def collect(self):
        groups = sorted(self.node.groups.items())
        for name, doc, value in GROUP_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=["group"])
            for group, g in groups:
                fam.add_metric([group], value(g))
            yield fam
        failovers = CounterMetricFamily("ledgermq_control_failovers", "Slaves promoted to "
                                        "master (takeovers).", labels=["group"])
        offsets = GaugeMetricFamily("ledgermq_control_broker_max_offset", "A broker's log end "
                                    "as its last heartbeat said.",
                                    labels=["group", "slot", "address"])
        for group, g in groups:
            failovers.add_metric([group], len(g.state.takeovers))
            for b in list(g.brokers.values()):
                offsets.add_metric([group, str(b.slot), b.addr], b.max_offset)
        yield failovers
        yield offsets


def registry_for(node: "ControlNode") -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ControlNodeCollector(node))
    return reg
