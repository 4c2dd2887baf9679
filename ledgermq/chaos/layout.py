"""A cluster laid out on test hosts: every name server, controller, control node and broker
`cluster.up` starts runs on a test host of its own (named as the process), listening on
that host's address; clients stay on the root side."""
from __future__ import annotations

from pathlib import Path

from ..localcluster.cluster import Placement, names, up
from .netns import TestNet


def placement(net: TestNet) -> Placement:
    """Each process on the test host of its name, started there."""
    return Placement(addr=lambda name: net.host(name).addr,
                     popen=lambda name: net.host(name).popen)


def up_on(net: TestNet, mode: str, replicas: int, d: Path, *, groups: int = 1,
          namesrvs: int = 1, controllers: int = 1, extra: dict[str, str] | None = None) -> dict:
    """`cluster.up` with every process on its own host of `net` (made with `hosts(...)`)."""
    return up(mode, replicas, d, extra, controllers=controllers, groups=groups,
              namesrvs=namesrvs, place=placement(net))


def hosts(mode: str, replicas: int, *, groups: int = 1, namesrvs: int = 1,
          controllers: int = 1) -> dict[str, str]:
    """The test hosts a layout needs, by name, with each one's role (for the schedule)."""
    return names(mode, replicas, groups, namesrvs, controllers)
