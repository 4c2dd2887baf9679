"""What brokers tell the controller leader in their heartbeats (RocketMQ's BrokerLiveInfo:
epoch, max offset, confirm offset, election priority), and the election order built from
it. Kept in the leader's memory only: the order is computed when an election is proposed
and travels inside the ElectMaster command, so applying the command stays deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

LOWEST_PRIORITY = 2**31 - 1  # brokerElectionPriority's default: lower values win


@dataclass(frozen=True)
class BrokerReport:
    epoch: int = -1  # the last epoch in the broker's epoch file
    max_offset: int = -1  # its commit log's end
    confirm_offset: int = -1  # what it knows the SyncStateSet holds
    priority: int = LOWEST_PRIORITY  # brokerElectionPriority

    def view(self) -> dict:
        return {"epoch": self.epoch, "maxOffset": self.max_offset,
                "confirmOffset": self.confirm_offset, "electionPriority": self.priority}


UNREPORTED = BrokerReport()


def elect_order(broker_ids, reports: dict[int, BrokerReport]) -> tuple[int, ...]:
    """Best candidate first, as RocketMQ's DefaultElectPolicy: highest epoch, then highest
    max offset (fewer messages for the others to truncate), then lowest priority value;
    the id breaks what is left, so the order is the same on every run."""
    def key(b: int):
        r = reports.get(b, UNREPORTED)
        return (-r.epoch, -r.max_offset, r.priority, b)
    return tuple(sorted(set(broker_ids), key=key))
