"""The events a simulator schedules in its World: small frozen dataclasses. The harness
hands each to the simulator's `on_<name>` handler (LinkClosed -> on_link_closed), so an
event's class is its kind and its fields are its payload.

Events that carry no message are immutable, so a simulator may schedule one object many
times (its ticks, say) instead of building a new one each time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

event = dataclass(frozen=True, slots=True)


@event
class Deliver:
    """A datagram (World.send) reaches `dst`."""
    dst: str
    msg: Any


@event
class LinkDeliver:
    """A message on an ordered link (Links.send) reaches `dst`."""
    dst: str
    link: int
    msg: Any


@event
class LinkClosed:
    """`node` learns that its end of `link` is closed."""
    node: str
    link: int


@event
class Tick:
    """`node`'s timer: its cores' tick(now)."""
    node: str


@event
class Beat:
    """`node` heartbeats its control plane (control node, controller)."""
    node: str


@event
class FlushDone:
    """`node`'s commit-log flush (group commit) finishes, unless it crashed meanwhile
    (`incarnation` counts its crashes)."""
    node: str
    incarnation: int


@event
class Restart:
    """A crashed `node` comes back with what its disk kept."""
    node: str


@event
class Resume:
    """A paused `node` runs again and gets the messages held for it."""
    node: str


@event
class Client:
    """Producers act: send, or resolve what is pending."""


@event
class Fault:
    """The nemesis strikes (while the harness says faults are on)."""


@event
class Heal:
    """Partitions and message loss end."""


CLIENT, FAULT, HEAL = Client(), Fault(), Heal()
