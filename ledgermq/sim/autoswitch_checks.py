"""The controller-mode simulator's brokers and the invariants checked on them (see
autoswitch.py): acked-on-new-master, slave-prefix, epoch-agreement, no-needless-cut,
acked-readable."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..replication.autoswitch.transfer import AutoSwitchMaster, AutoSwitchSlave
from .disk import SimLog
from .result import Violation


@dataclass
class Broker:
    """A broker; its crash keeps its log and its epoch file."""
    name: str
    log: SimLog = field(default_factory=SimLog)
    epochs: list[tuple[int, int]] = field(default_factory=list)  # the EpochFile
    alive: bool = True
    broker_id: int | None = None
    role: str = "NONE"
    master_epoch: int = -1
    view: dict = field(default_factory=dict)
    master: AutoSwitchMaster | None = None
    slave: AutoSwitchSlave | None = None
    link: int | None = None
    controller: int = 0  # which controller it asks first
    bound: int = 0  # its dispatch bound: what consumers read through its queues
    holes: list[tuple[int, int]] = field(default_factory=list)  # (bug) entries never rebuilt


@dataclass
class Acked:
    number: int
    offset: int
    data: bytes


def acked_in(b: Broker, acked: Iterable[Acked]) -> None:
    data = b.log.data
    for a in acked:
        if bytes(data[a.offset:a.offset + len(a.data)]) != a.data:
            raise Violation("acked-on-new-master", f"{b.name} became master without "
                            f"acknowledged message {a.number} at {a.offset}")


def prefix_of_master(b: Broker, m: Broker | None) -> None:
    if m is None or m.master is None:
        return
    if bytes(b.log.data) != bytes(m.log.data[:b.log.end]):
        raise Violation("slave-prefix", f"{b.name}'s log is not a prefix of its master "
                        f"{m.name}'s")


def epochs_agree(brokers: Iterable[Broker]) -> None:
    seen: dict[int, tuple[str, int]] = {}
    for b in brokers:
        for epoch, start in b.epochs:
            other = seen.setdefault(epoch, (b.name, start))
            if other[1] != start:
                raise Violation("epoch-agreement", f"epoch {epoch} starts at {other[1]} "
                                f"on {other[0]} but at {start} on {b.name}")


def cut_needed(b: Broker, m: Broker | None, offset: int) -> None:
    """A cut must remove something the master does not hold: a slave whose tail is the
    master's, byte for byte, was cut only because an epoch history was wrong."""
    if m is None or m.log.end < b.log.end or offset >= b.log.end:
        return
    if bytes(b.log.data[offset:]) == bytes(m.log.data[offset:b.log.end]):
        raise Violation("no-needless-cut", f"{b.name} cuts {offset}-{b.log.end}, which "
                        f"its master {m.name} holds alike (epochs {b.epochs} vs {m.epochs})")


def acked_readable(brokers: Iterable[Broker], acked: Iterable[Acked]) -> bool:
    """Every acknowledged send lies below the live master's dispatch bound, in no hole."""
    m = next((b for b in brokers if b.alive and b.master is not None), None)
    return m is not None and all(
        a.offset + len(a.data) <= m.bound and
        not any(lo < a.offset + len(a.data) and a.offset < hi for lo, hi in m.holes)
        for a in acked)
