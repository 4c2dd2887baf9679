"""The messages of the checkpoint-mode simulation (`checkpoint`): what brokers and
producers send the control node and what it answers (views and promotions are the cores'
own), and the simulator's own timers. All small frozen dataclasses."""
from __future__ import annotations

from dataclasses import dataclass

from ..replication.checkpoint import Resolution


# ---- messages to and from the control node (views and promotions are the cores' own) ----
@dataclass(frozen=True, slots=True)
class BrokerBeat:
    name: str
    wants_master: bool
    epoch: int
    log_end: int
    checkpoint: int
    members: tuple[int, ...] | None  # a master's proposed checkpoint members, else None
    members_version: int


@dataclass(frozen=True, slots=True)
class CacheMessage:
    """S3-3: a master whose sync timed out hands the message to the control node."""
    name: str
    epoch: int
    offset: int
    end: int
    number: int
    data: bytes


@dataclass(frozen=True, slots=True)
class HandOverAsk:
    """A master gives the group up (no client reaches it), preferring slave `prefer`."""
    name: str
    epoch: int
    prefer: int


@dataclass(frozen=True, slots=True)
class CacheAnswer:
    number: int
    ok: bool


@dataclass(frozen=True, slots=True)
class Promoted:
    name: str
    slot: int
    epoch: int
    takeover: int
    moved: tuple[tuple[int, int, int], ...]  # (old offset, new offset, new end) replayed
    log_end: int


@dataclass(frozen=True, slots=True)
class ResolveAsk:
    number: int
    epoch: int
    end: int


@dataclass(frozen=True, slots=True)
class Resolved:
    number: int
    resolution: Resolution


@dataclass(frozen=True, slots=True)
class Resolve:
    """A producer's timer: ask the control node about a PENDING send."""
    number: int


@dataclass(frozen=True, slots=True)
class CheckpointSaved:
    """A master's save of its checkpoint file is durable (unless it crashed meanwhile)."""
    node: str
    incarnation: int
