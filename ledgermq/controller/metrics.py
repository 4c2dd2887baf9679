"""Each broker group as the controller's metadata holds it, for Prometheus (read at scrape
time; the metadata is replicated, so every controller node reports the same once it has
applied the log): master, master epoch — every master election raises it by one, so it is
also the count of elections — SyncStateSet and registered brokers."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .metadata import BrokerGroup

GROUP_GAUGES = (
    ("ledgermq_controller_master_epoch", "The group's master epoch.", lambda g: g.master_epoch),
    ("ledgermq_controller_master_broker_id", "The group's master (-1: none).",
     lambda g: -1 if g.master is None else g.master),
    ("ledgermq_controller_sync_state_set_size", "Brokers in the group's SyncStateSet.",
     lambda g: len(g.sync_state_set)),
    ("ledgermq_controller_brokers", "Brokers registered in the group.", lambda g: len(g.brokers)),
)


def group_families(groups: dict[str, BrokerGroup], labels: list[str], values: list[str]):
    rows = sorted(groups.items())
    for name, doc, value in GROUP_GAUGES:
        fam = GaugeMetricFamily(name, doc, labels=labels + ["group"])
        for group, g in rows:
            fam.add_metric(values + [group], value(g))
        yield fam
    elections = CounterMetricFamily("ledgermq_controller_master_elections", "Masters elected "
                                    "for the group.", labels=labels + ["group"])
    for group, g in rows:
        elections.add_metric(values + [group], g.master_epoch)
    yield elections
