"""Classic master/slave HA (S2) in the simulator: a fixed master (b0) with one or two slaves,
SYNC_MASTER or ASYNC_MASTER, under broker crashes, partitions and slow networks (see
`ha_group` for the group and the checks every design shares).

Invariants, besides the group's:
- sync-ack-on-slave (SYNC_MASTER): a send answered SEND_OK is, at that moment, on a slave;
- acked-kept: when a restarted master takes writes again, its log holds every byte each
  slave that reported meanwhile holds (a new write over a slave's bytes would fork the
  logs, and the slave would drop its copy); for a SYNC_MASTER with two brokers, also
  every message acknowledged so far, at the offset it was acknowledged at, and every byte
  its live slave holds; at the end of the run the acknowledged messages are still there.

A master's crash may cut its log back (a power cut under ASYNC_FLUSH, or damage its
CRCs find) to any message boundary: it must refill from its slaves
(replication/ha/refill.py). With two slaves, one away through the whole recovery may be
the only one holding the last acknowledged messages (two faults: not held against it),
and its log forks from the master's once the master writes again: the tail-digest check
on (re)connection must refuse it rather than extend the fork (slave-prefix).

ASYNC_MASTER promises nothing beyond the master's write, so its runs check the group's
invariants (a slave's log is a prefix of its master's), liveness, and that a restarted
one refilled from every slave that reported within its window before it wrote (it does
not wait longer for an absent slave, as a SYNC_MASTER does).
"""
from __future__ import annotations

from typing import ClassVar

from ..replication.ha import BUGS as HA_BUGS
from .ha_group import HAGroupSim, Node, Sent
from .result import Violation

MODES = ("sync", "async")
# bugs of the drivers' part (this simulator plays the drivers)
DRIVER_BUGS = {"no-fork-check": "the drivers skip the tail-digest check: a slave away while "
                                "its master lost bytes extends its forked log"}
BUGS = {**{b: HA_BUGS[b] for b in ("ack-on-master-write", "no-refill")}, **DRIVER_BUGS}


class ClassicHASim(HAGroupSim):
    BUGS = BUGS
    INVARIANTS: ClassVar[dict[str, str]] = {
        **HAGroupSim.INVARIANTS,
        "sync-ack-on-slave": "a SYNC_MASTER acknowledges a send only once a slave holds it",
        "acked-kept": "a restarted master takes writes only once its log holds every byte "
                      "a slave that reported holds (SYNC_MASTER: and every acknowledged "
                      "message and every byte a live slave holds)",
    }

    def __init__(self, seed: int, *, mode: str = "sync", steps: int = 20_000,
                 bugs=frozenset(), replicas: int | None = None, trace_events: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        super().__init__(seed, steps=steps, bugs=bugs, replicas=replicas,
                         trace_events=trace_events)
        self.mode = mode
        self.acks_on_write = mode == "async"
        self.recover_ms = self.rng.choice((100, 400))
        self.damaged = 0  # master crashes that cut its log back

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

    def _recover_ms(self, node: Node) -> int | None:
        """A master restarted (not the group's first start: no slave held anything then)
        recovers from its slaves."""
        return self.recover_ms if node.incarnation else None

    def _waits_for_a_slave(self) -> bool:
        return self.mode == "sync"  # an ASYNC_MASTER takes writes once its window passed

    def _damage(self, node: Node) -> None:
        """A master's crash cuts its log back, half the time, to one of its last messages'
        starts: what a power cut or damaged segment leaves."""
        if node.name != self.names[0] or self.rng.random() < 0.5:
            return
        starts = sorted(node.log.messages().values())[-20:]
        if starts:
            cut = self.rng.choice(starts)
            self.w.log(f"{node.name}'s log cut back from {node.log.end} to {cut}")
            node.log.truncate(cut)
            self.damaged += 1

    def _on_recovered(self, node: Node) -> None:
        for link, ln in node.master.links.items():
            if ln.reported > node.log.end:
                raise Violation("acked-kept", f"{node.name} takes writes with its log ending "
                                f"at {node.log.end}; the slave on link {link} reported "
                                f"{ln.reported}")
        self._check_acked_kept(node, "takes writes")
        if len(self.names) != 2 or self.mode != "sync":
            return  # (an ASYNC_MASTER does not wait for a slave that did not report)
        for other in self.nodes.values():
            if other is not node and other.alive and other.log.end > node.log.end:
                raise Violation("acked-kept", f"{node.name} takes writes with its log ending "
                                f"at {node.log.end}; {other.name} holds up to {other.log.end}")

    def check_liveness(self) -> None:
        super().check_liveness()
        self._check_acked_kept(self.nodes[self.names[0]], "ends the run")

    def _check_acked_kept(self, node: Node, when: str) -> None:
        if self.mode != "sync" or len(self.names) != 2:
            return  # (with two slaves, the one holding the last acks may be away: 2 faults)
        held = node.log.messages()
        for s in self.sent.values():
            if s.status == "OK" and held.get(s.number) != s.offset:
                raise Violation("acked-kept", f"{node.name} {when} without acknowledged "
                                f"message {s.number} at [{s.offset}, {s.end}) (its log ends "
                                f"at {node.log.end})")

    def _on_acked(self, node: Node, s: Sent) -> None:
        for other in self.nodes.values():
            if other is not node and other.log.data[s.offset:s.end] == \
                    node.log.data[s.offset:s.end]:
                return
        raise Violation("sync-ack-on-slave", f"message {s.number} acknowledged by "
                        f"{node.name} but no slave holds [{s.offset}, {s.end})")

    def stats(self) -> dict:
        return {"mode": self.mode, "damaged": self.damaged, **super().stats()}
