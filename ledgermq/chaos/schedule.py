"""A seeded fault schedule: which fault, on which nodes, from when to when. The same seed,
families, nodes and timings give the same schedule, so a run replays from its seed.

Faults come one at a time: a warm-up, then windows of at most `interval` seconds, each
followed by a quiet gap of at least `quiet` seconds, and after the last heal a quiet period
of at least `final_quiet` before the drain. The families asked for come in turns (a seeded
order each round), so a short run still sees each.

Nodes are given with a role: `broker` (optionally `broker:GROUP`), `controller`,
`controlnode` or `namesrv`. Signals (kill, pause) hit any node; store faults (lost-writes,
corrupt, disk-full) a broker; partitions and client cuts the servers other than name
servers. A target of `pick: master` in a window's params means: whichever of `targets`
(one group's brokers) is the master when the fault starts, as the runner finds it.
`combined` kills a group's master together with what elects masters: the controller
leader (`also: controller-leader`, among the targets' controllers), the control node
group's leader (`also: controlnode-leader`) or the one control node (`also: control`),
both restarted when the window ends.
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FAMILIES = ("kill", "pause", "partition", "slow", "lost-writes", "corrupt", "disk-full",
            "combined")
SHAPES = ("isolate", "split", "bridge", "ring", "clients")
ROLES = ("broker", "controller", "controlnode", "namesrv")
STORE_FAULTS = ("lost-writes", "corrupt", "disk-full")


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    fault: str  # a family
    targets: tuple[str, ...]
    params: dict = field(default_factory=dict, hash=False)

    @property
    def label(self) -> str:
        """The fault as a history and a timeline name it: `kill`, `partition:ring`."""
        shape = self.params.get("shape")
        return f"{self.fault}:{shape}" if shape else self.fault

    def to_json(self) -> dict:
        return {"start": self.start, "end": self.end, "fault": self.fault,
                "targets": list(self.targets), "params": self.params}

    @classmethod
    def from_json(cls, d: Mapping) -> Window:
        return cls(d["start"], d["end"], d["fault"], tuple(d["targets"]), dict(d["params"]))


def parse_faults(text: str) -> list[str]:
    """`kill,partition:ring,slow` (or `all`) -> the fault list, each checked."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return list(FAMILIES)
    for n in names:
        _family(n)
    return names


def _family(name: str) -> tuple[str, str | None]:
    fam, _, shape = name.partition(":")
    if fam not in FAMILIES:
        raise ValueError(f"unknown fault {name!r}: known are {', '.join(FAMILIES)} "
                         f"(partition:SHAPE with SHAPE one of {', '.join(SHAPES)})")
    if shape and (fam != "partition" or shape not in SHAPES):
        raise ValueError(f"unknown partition shape {shape!r} in {name!r}: "
                         f"known are {', '.join(SHAPES)}")
    return fam, shape or None


def plan(seed: int, faults: Iterable[str], nodes: Mapping[str, str], duration: float,
         interval: float, *, quiet: float | None = None, final_quiet: float | None = None,
         warmup: float | None = None) -> list[Window]:
    """The windows for a run of `duration` seconds. `quiet` (default `interval`) is the least
    gap between windows, `warmup` (default `quiet`) the time before the first,
    `final_quiet` (default `quiet`) the least time between the last heal and the end."""
    faults = list(faults)
    if not faults:
        raise ValueError("no fault families asked for")
    if duration <= 0 or interval <= 0:
        raise ValueError(f"duration and interval must be positive, got {duration}, {interval}")
    quiet = interval if quiet is None else quiet
    warmup = quiet if warmup is None else warmup
    final_quiet = quiet if final_quiet is None else final_quiet
    if min(quiet, warmup, final_quiet) < 0:
        raise ValueError("quiet, warmup and final_quiet cannot be negative")
    chooser = _Chooser(nodes, random.Random(seed))
    for f in faults:
        chooser.check(*_family(f))
    last_end = duration - final_quiet
    if warmup + interval / 2 > last_end:
        raise ValueError(f"duration {duration} s is too short for one fault window: "
                         f"{warmup} s warm-up, windows up to {interval} s, "
                         f"{final_quiet} s final quiet period")
    rnd = chooser.rnd
    out: list[Window] = []
    t, turn = warmup, []
    while True:
        length = rnd.uniform(0.5, 1.0) * interval
        if t + length > last_end:
            break
        if not turn:
            turn = list(faults)
            rnd.shuffle(turn)
        fam, shape = _family(turn.pop())
        targets, params = chooser.choose(fam, shape)
        start = math.ceil(t * 1000) / 1000  # to the ms, never into the gap before it
        end = round(start + math.floor(length * 1000) / 1000, 3)
        out.append(Window(start, end, fam, targets, params))
        t = out[-1].end + rnd.uniform(1.0, 1.5) * quiet
    return out


class _Chooser:
    """Which nodes each family aims at, drawn from one seeded generator."""

    def __init__(self, nodes: Mapping[str, str], rnd: random.Random):
        self.rnd = rnd
        self.role: dict[str, str] = {}
        self.group: dict[str, str | None] = {}
        for name, role in nodes.items():
            kind, _, group = role.partition(":")
            if kind not in ROLES:
                raise ValueError(f"node {name}: unknown role {role!r} (known: {', '.join(ROLES)})")
            self.role[name], self.group[name] = kind, group or None
        self.every = sorted(self.role)
        self.brokers = [n for n in self.every if self.role[n] == "broker"]
        self.servers = [n for n in self.every if self.role[n] != "namesrv"]

    def check(self, fam: str, shape: str | None) -> None:
        if not self.every:
            raise ValueError("a fault schedule needs nodes")
        if fam in STORE_FAULTS and not self.brokers:
            raise ValueError(f"{fam} needs a broker among the nodes")
        if fam == "partition" and len(self.servers) < 2:
            raise ValueError("a partition needs at least 2 servers (name servers aside)")
        if shape == "ring" and len(self.servers) < 4:
            raise ValueError(f"a majorities ring needs at least 4 servers, "
                             f"got {len(self.servers)}")
        if fam == "combined" and not self._coordinators():
            raise ValueError("combined needs a controller or a control node among the nodes")
        if shape == "bridge" and len(self.servers) < 3:
            raise ValueError(f"a bridge needs at least 3 servers, got {len(self.servers)}")

    def choose(self, fam: str, shape: str | None) -> tuple[tuple[str, ...], dict]:
        rnd = self.rnd
        if fam == "kill":
            return self._one_or_master(self.every, {"signal": "KILL", "restart": True})
        if fam == "pause":
            return self._one_or_master(self.every, {"signal": "STOP"})
        if fam == "slow":
            delay = rnd.randrange(20, 501)
            return (rnd.choice(self.every),), {
                "delay_ms": delay, "jitter_ms": rnd.randrange(0, delay // 2 + 1),
                "loss_pct": rnd.choice([0, 0, 1, 5, 20]),
                "reorder_pct": rnd.choice([0, 0, 5, 25]), "seed": rnd.getrandbits(31)}
        if fam == "lost-writes":  # the master's unsynced tail is the one acks may rest on
            return self._one_or_master(self.brokers, {"seed": rnd.getrandbits(31)})
        if fam == "corrupt":
            return (rnd.choice(self.brokers),), {
                "how": rnd.choice(["zero", "flip"]), "bytes": rnd.choice([4096, 262144]),
                "seed": rnd.getrandbits(31)}
        if fam == "disk-full":
            return (rnd.choice(self.brokers),), {}
        if fam == "combined":
            node = rnd.choice(self.brokers)
            group = tuple(n for n in self.brokers if self.group[n] == self.group[node])
            coord = self._coordinators()
            also = "controller-leader" if self.role[coord[0]] == "controller" else \
                "controlnode-leader" if len(coord) > 1 else coord[0]
            return tuple(coord) + group, {"signal": "KILL", "restart": True, "pick": "master",
                                          "also": also}
        return self._partition(shape)

    def _coordinators(self) -> list[str]:
        """The controllers, else the control node(s): what a combined fault hits."""
        ctl = [n for n in self.every if self.role[n] == "controller"]
        return ctl or [n for n in self.every if self.role[n] == "controlnode"]

    def _one_group(self, shape: str, servers: list[str]) -> list[str]:
        """With several broker groups, a split, bridge or ring among one group's brokers and
        the coordinators (what that group's replication sees): one over every server cuts
        mostly pairs from different groups, which never talk. Every server when one group's
        are too few for the shape."""
        groups = sorted({g for n in self.brokers if (g := self.group[n])})
        if len(groups) < 2:
            return servers
        g = self.rnd.choice(groups)
        pool = sorted([n for n in self.brokers if self.group[n] == g] + self._coordinators())
        least = {"split": 2, "bridge": 3, "ring": 4}[shape]
        return pool if len(pool) >= least else servers

    def _one_or_master(self, pool: list[str], params: dict) -> tuple[tuple[str, ...], dict]:
        node = self.rnd.choice(pool)
        if self.role[node] == "broker" and self.rnd.random() < 0.5:
            group = [n for n in self.brokers if self.group[n] == self.group[node]]
            return tuple(group), {**params, "pick": "master"}
        return (node,), params

    def _partition(self, shape: str | None) -> tuple[tuple[str, ...], dict]:
        rnd, servers = self.rnd, list(self.servers)
        if shape is None:
            fits = [s for s in SHAPES if not (s == "ring" and len(servers) < 4)
                    and not (s == "bridge" and len(servers) < 3)]
            shape = rnd.choice(fits)
        if shape in ("split", "bridge", "ring"):
            servers = self._one_group(shape, servers)
        rnd.shuffle(servers)
        if shape == "isolate":
            return (servers[0],), {"shape": shape}
        if shape == "clients":
            if self.brokers and rnd.random() < 0.5:
                return self._one_or_master(self.brokers, {"shape": shape})
            return (servers[0],), {"shape": shape}
        if shape == "split":
            k = rnd.randrange(1, max(1, (len(servers) - 1) // 2) + 1)  # a minority
            small, big = sorted(servers[:k]), sorted(servers[k:])
            return tuple(small), {"shape": shape, "groups": [small, big]}
        if shape == "bridge":
            middle, rest = servers[0], servers[1:]
            half = len(rest) // 2
            return (middle,), {"shape": shape, "left": sorted(rest[:half]),
                               "right": sorted(rest[half:]), "middle": middle}
        return tuple(sorted(servers)), {"shape": "ring", "ring": servers}
