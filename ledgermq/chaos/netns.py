"""Test hosts: each a network namespace with its own address on one bridge, so every server
of a test cluster runs as a separate machine and the network between them can be cut or
slowed. Clients run on the root side, on the bridge's address.

    with TestNet(["n0", "n1", "n2"]) as net:        # needs root: see available()
        p = net.host("n0").popen([sys.executable, "-m", "ledgermq", "namesrv", ...])
        net.isolate("n0"); ...; net.heal()

"""
from __future__ import annotations

import functools
import ipaddress
import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import cuts
from .cleanup import guard_signals, kill, live, new_tag, signals_deferred, sweep, unguard_signals
from .iproute import NetError, batch, ip, kill_all_in, links, namespaces, tc, used_networks
from .shaper import Shape

CUT_PREF, LOCAL_PREF = 10, 100  # cut rules come before the local table, which moves to 100
SHAPER_TAP = "shape0"


@dataclass(eq=False)
class Host:
    """One test host. `addr` is its IPv4 address; servers inside listen on it."""
    name: str
    netns: str
    addr: str
    net: TestNet = field(repr=False)

    def popen(self, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start `argv` inside this host (environment inherited, PYTHONPATH included), in a
        session of its own unless told otherwise; the net stops it when it closes."""
        return self.net._popen(self, argv, **kw)

    def run(self, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        """Run `argv` inside this host to completion (60 s unless `timeout` says otherwise)."""
        kw.setdefault("timeout", 60)
        return subprocess.run(["ip", "netns", "exec", self.netns, *map(str, argv)], **kw)


class TestNet:
    """A bridge on the root side (the clients' address, `client_addr`) and `hosts` test hosts
    (a count, named h0.., or a list of names), each a namespace with a veth to the bridge,
    an address in `subnet` (a free 10.77.x.0/24 when not given) and `lo` up.

    Faults (each idempotent, undone by `heal` / `unslow`): `partition`, `isolate`,
    `bridge`, `ring` set which hosts cannot talk (each replaces the previous one);
    `cut_clients` keeps the root side from reaching hosts; `slow` shapes a host's link.
    A cut drops packets silently where they arrive, as a failed switch would: a connect
    times out and an established connection stalls, then resumes after `heal`.

    Closing (the `with` block ending, an exception, SIGTERM or SIGHUP, interpreter exit)
    stops every process the net started and removes its namespaces, links and bridge."""
    __test__ = False  # a helper, not a pytest test class

    def __init__(self, hosts: int | Sequence[str] = 3, subnet: str | None = None):
        names = [f"h{i}" for i in range(hosts)] if isinstance(hosts, int) else list(hosts)
        if not 1 <= len(names) <= 200:
            raise ValueError(f"a test net has 1..200 hosts, got {len(names)}")
        bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(n))]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"host names must be unique words, got {names}")
        self.tag = new_tag()
        self._names, self._subnet = names, subnet
        self.hosts: list[Host] = []
        self.client_addr = ""
        self._procs: list[tuple[subprocess.Popen, bool]] = []  # (process, its own group)
        self._drops: dict[str, set[str]] = {n: set() for n in names}  # host -> dropped srcs
        self._cuts: set[frozenset] = set()
        self._clients_cut: set[str] = set()
        self._shapers: dict[str, tuple[tuple, subprocess.Popen]] = {}
        self._open = False

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> TestNet:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> TestNet:
        if self._open or self.hosts:
            raise NetError(f"test net {self.tag} opens once; make a new TestNet")
        live[self.tag] = self
        self._open = True
        guard_signals()
        try:
            sweep()
            subnet = _pick_subnet(self._subnet, len(self._names))
            addrs = subnet.hosts()
            self.client_addr, bridge, plen = str(next(addrs)), f"{self.tag}-br", subnet.prefixlen
            batch([f"link add {bridge} type bridge", f"link set {bridge} addrgenmode none",
                   f"addr add {self.client_addr}/{plen} dev {bridge}", f"link set {bridge} up"])
            for i, name in enumerate(self._names):
                h = Host(name, f"{self.tag}-{i:x}", str(next(addrs)), self)
                self.hosts.append(h)
                batch([f"netns add {h.netns}",
                       f"link add {h.netns} type veth peer name eth0 netns {h.netns}",
                       f"link set {h.netns} addrgenmode none",
                       f"link set {h.netns} master {bridge} up"])
                batch(["link set lo up", "link set eth0 addrgenmode none",  # IPv4 only
                       f"addr add {h.addr}/{plen} dev eth0", "link set eth0 up",
                       f"rule add pref {LOCAL_PREF} lookup local", "rule del pref 0"],
                      netns=h.netns)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every process, remove every namespace, link and the bridge; idempotent.
        Raises NetError naming what could not be removed."""
        if not self._open:
            return
        with signals_deferred():
            for p, own_group in self._procs:
                kill(p, own_group)
            for _, shaper in self._shapers.values():
                _close_pipes(shaper)
            self._shapers.clear()
            for h in self.hosts:  # what escaped its process group, still in our namespace
                kill_all_in(h.netns)
            end = time.monotonic() + 10
            while any(ip("netns", "pids", h.netns, check=False).strip() for h in self.hosts) \
                    and time.monotonic() < end:
                time.sleep(0.05)
            for h in self.hosts:
                ip("link", "del", h.netns, check=False)  # the veth pair, both ends
                ip("netns", "del", h.netns, check=False)
            ip("link", "del", f"{self.tag}-br", check=False)
            self._open = False
            live.pop(self.tag, None)
            left = [n for n in namespaces() + links() if n.startswith(self.tag + "-")]
        unguard_signals()
        if left:
            raise NetError(f"test net {self.tag}: could not remove {left}")

    # -- hosts and processes ------------------------------------------------------------
    def host(self, name: str | Host) -> Host:
        if isinstance(name, Host):
            if name.net is not self:
                raise ValueError(f"host {name.name} belongs to another test net")
            return name
        for h in self.hosts:
            if h.name == name:
                return h
        raise ValueError(f"no host {name!r} in this test net (hosts: {self._names})")

    def _popen(self, host: Host, argv: Sequence[str], **kw) -> subprocess.Popen:
        if not self._open:
            raise NetError(f"test net {self.tag} is not open")
        kw.setdefault("start_new_session", True)
        p = subprocess.Popen(["ip", "netns", "exec", host.netns, *map(str, argv)], **kw)
        self._procs.append((p, kw["start_new_session"]))
        return p

    # -- partitions ---------------------------------------------------------------------
    def partition(self, groups: Iterable[Iterable[str | Host]]) -> None:
        """Hosts in different groups cannot talk; unnamed hosts talk to all. Clients still
        reach every host (see `cut_clients`)."""
        self._set_cuts(cuts.partition([[self.host(h).name for h in g] for g in groups]))

    def isolate(self, host: str | Host) -> None:
        self._set_cuts(cuts.isolate(self.host(host).name, self._names))

    def bridge(self, left: Iterable[str | Host], right: Iterable[str | Host],
               middle: str | Host) -> None:
        """`left` and `right` cannot talk to each other; both talk to `middle`."""
        self._set_cuts(cuts.bridge([self.host(h).name for h in left],
                                   [self.host(h).name for h in right], self.host(middle).name))

    def ring(self, order: Sequence[str | Host] | None = None) -> None:
        """Majorities ring over `order` (all hosts in their order when not given)."""
        self._set_cuts(cuts.majorities_ring([self.host(h).name for h in order or self.hosts]))

    def cut_clients(self, *hosts: str | Host) -> None:
        """The root side (clients) can no longer reach `hosts`; hosts still reach each other."""
        self._apply(self._cuts, self._clients_cut | {self.host(h).name for h in hosts})

    def heal(self) -> None:
        """Undo every partition and client cut (slow links stay until `unslow`)."""
        self._apply(set(), set())

    def _set_cuts(self, wanted: set[frozenset]) -> None:
        self._apply(wanted, self._clients_cut)

    def _apply(self, wanted: set[frozenset], clients_cut: set[str]) -> None:
        """Each host drops, on arrival, packets from the hosts it is cut from (one rule per
        source address: `ip rule ... from ADDR blackhole`)."""
        if not self._open:
            raise NetError(f"test net {self.tag} is not open")
        want: dict[str, set[str]] = {n: set() for n in self._names}
        for a, b in map(tuple, wanted):
            want[a].add(self.host(b).addr)
            want[b].add(self.host(a).addr)
        for name in clients_cut:
            want[name].add(self.client_addr)
        for h in self.hosts:
            have = self._drops[h.name]
            lines = [f"rule del pref {CUT_PREF} from {a} blackhole"
                     for a in sorted(have - want[h.name])]
            lines += [f"rule add pref {CUT_PREF} from {a} blackhole"
                      for a in sorted(want[h.name] - have)]
            if lines:
                batch(lines, netns=h.netns)
                self._drops[h.name] = want[h.name]
        self._cuts, self._clients_cut = set(wanted), set(clients_cut)

    @property
    def cuts(self) -> set[frozenset]:
        """The host pairs currently cut apart (as name pairs)."""
        return set(self._cuts)

    # -- slow links ---------------------------------------------------------------------
    def slow(self, host: str | Host, delay_ms: float = 0, jitter_ms: float = 0,
             loss_pct: float = 0, reorder_pct: float = 0, seed: int = 0) -> None:
        """Delay, jitter, lose and reorder what `host` sends (netem's knobs: see
        `shaper.Shape`), replacing any earlier shape of its link."""
        h = self.host(host)
        shape = Shape(delay_ms, jitter_ms, loss_pct, reorder_pct)
        if h.name in self._shapers and self._shapers[h.name][0] == (shape, seed):
            return
        self.unslow(h)
        p = self._popen(h, [sys.executable, "-m", "ledgermq.chaos.shaper", "eth0",
                            "--tap", SHAPER_TAP, "--delay-ms", shape.delay_ms,
                            "--jitter-ms", shape.jitter_ms, "--loss-pct", shape.loss_pct,
                            "--reorder-pct", shape.reorder_pct, "--seed", seed],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if _read_line(p, timeout=30) != "ready":
            kill(p, True)
            why = p.stderr.read().strip() or "no ready line within 30 s"
            _close_pipes(p)
            raise NetError(f"the link shaper on {h.name} did not start: {why}")
        self._shapers[h.name] = ((shape, seed), p)
        tc("qdisc", "add", "dev", "eth0", "clsact", netns=h.netns)
        tc("filter", "add", "dev", "eth0", "egress", "protocol", "all", "u32", "match", "u32",
           "0", "0", "action", "mirred", "egress", "redirect", "dev", SHAPER_TAP, netns=h.netns)

    def unslow(self, host: str | Host) -> None:
        h = self.host(host)
        entry = self._shapers.pop(h.name, None)
        if entry is None:
            return
        tc("qdisc", "del", "dev", "eth0", "clsact", netns=h.netns, check=False)
        p = entry[1]
        p.terminate()  # it sends what it still holds, then exits
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            kill(p, True)
        _close_pipes(p)


def _read_line(p: subprocess.Popen, timeout: float) -> str | None:
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline().strip() if ready else None


def _close_pipes(p: subprocess.Popen) -> None:
    for f in (p.stdout, p.stderr):
        if f:
            f.close()


def _pick_subnet(requested: str | None, n_hosts: int) -> ipaddress.IPv4Network:
    used = [ipaddress.ip_interface(a).network for a in used_networks()]
    if requested is not None:
        try:
            net = ipaddress.IPv4Network(requested, strict=False)
        except ValueError as e:
            raise ValueError(f"subnet {requested!r} is not an IPv4 network: {e}") from None
        if net.num_addresses - 2 < n_hosts + 1:
            raise ValueError(f"subnet {net} has no room for {n_hosts} hosts and the bridge")
        for u in used:
            if net.overlaps(u):
                raise ValueError(f"subnet {net} overlaps {u}, already on this machine")
        return net
    start = os.getpid() % 256
    for k in range(256):
        net = ipaddress.IPv4Network(f"10.77.{(start + k) % 256}.0/24")
        if n_hosts <= 253 and not any(net.overlaps(u) for u in used):
            return net
    raise NetError("no free 10.77.x.0/24 left for a test net: pass subnet=")


@functools.cache
def available() -> str | None:
    """None when this machine can run test hosts, else why not (for a test's skip)."""
    if not sys.platform.startswith("linux"):
        return "test hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return f"test hosts need root (they create network namespaces); uid is {os.geteuid()}"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"test hosts need iproute2's `{tool}` on PATH"
    if not os.path.exists("/dev/net/tun"):
        return "slow links need /dev/net/tun (the shaper's tap device)"
    tag = new_tag()
    live[tag] = None
    try:
        batch([f"link add {tag}-br type bridge", f"netns add {tag}-0",
               f"link add {tag}-0 type veth peer name eth0 netns {tag}-0",
               f"link set {tag}-0 master {tag}-br"])
        tc("qdisc", "add", "dev", "eth0", "clsact", netns=f"{tag}-0")
    except NetError as e:
        return f"cannot create test hosts here: {e}"
    finally:
        for cmd in (("link", "del", f"{tag}-0"), ("netns", "del", f"{tag}-0"),
                    ("link", "del", f"{tag}-br")):
            ip(*cmd, check=False)
        live.pop(tag, None)
    return None
