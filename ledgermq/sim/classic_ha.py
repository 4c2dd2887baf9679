"""Classic master/slave HA (S2) in the simulator: a fixed master (b0) with one or two slaves,
SYNC_MASTER or ASYNC_MASTER, under broker crashes, partitions and slow networks (see
`ha_group` for the group and the checks every design shares).

Invariants, besides the group's:
- sync-ack-on-slave (SYNC_MASTER): a send answered SEND_OK is, at that moment, on a slave.

ASYNC_MASTER promises nothing beyond the master's write, so its runs check only the
group's invariants (a slave's log is a prefix of its master's) and liveness.
"""
from __future__ import annotations

from typing import ClassVar

from ..replication.ha import BUGS as HA_BUGS
from .ha_group import HAGroupSim, Node, Sent
from .result import Violation

MODES = ("sync", "async")
BUGS = {"ack-on-master-write": HA_BUGS["ack-on-master-write"]}


class ClassicHASim(HAGroupSim):
    BUGS = BUGS
    INVARIANTS: ClassVar[dict[str, str]] = {
        **HAGroupSim.INVARIANTS,
        "sync-ack-on-slave": "a SYNC_MASTER acknowledges a send only once a slave holds it",
    }

    def __init__(self, seed: int, *, mode: str = "sync", steps: int = 20_000,
                 bugs=frozenset(), replicas: int | None = None, trace_events: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        super().__init__(seed, steps=steps, bugs=bugs, replicas=replicas,
                         trace_events=trace_events)
        self.mode = mode
        self.acks_on_write = mode == "async"

    def _group_size(self) -> int:
        return self.rng.choice((2, 3))

    def _start_roles(self) -> None:
        master = self.names[0]
        self._lead(master)
        for name in self.names[1:]:
            self._follow(name, master)

    def _rejoin(self, node: Node) -> None:
        """Roles are configuration in S2 (brokerRole): b0 masters, the rest follow it."""
        if node.name == self.names[0]:
            self._lead(node.name)
        else:
            self._follow(node.name, self.names[0])

    def _on_acked(self, node: Node, s: Sent) -> None:
        for other in self.nodes.values():
            if other is not node and other.log.data[s.offset:s.end] == \
                    node.log.data[s.offset:s.end]:
                return
        raise Violation("sync-ack-on-slave", f"message {s.number} acknowledged by "
                        f"{node.name} but no slave holds [{s.offset}, {s.end})")

    def stats(self) -> dict:
        return {"mode": self.mode, **super().stats()}
