"""TCP-like links between simulated brokers (HA connections): messages on a link arrive in
order and only while it is open, and a message a cut drops breaks its link (a connection
never delivers a later byte without the earlier ones); closing one tells both ends a
moment later."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .events import LinkClosed, LinkDeliver
from .world import World


class SlaveLinking:
    """For simulations whose nodes run the HA master and slave cores over `Links`: a slave
    links to its master when the two can talk, or learns it is cut off."""
    w: World
    net_links: Links

    if TYPE_CHECKING:  # each simulation drives its cores its own way
        def _run_master(self, node: Any, actions: list[Any]) -> None: ...
        def _run_slave(self, node: Any, actions: list[Any]) -> None: ...

    def _link_to(self, node: Any, m: Any) -> None:
        if m is None or not m.alive or m.master is None or \
                (node.name, m.name) in self.w.net.blocked:
            node.slave.disconnected(self.w.now)
            return
        link = node.link = self.net_links.connect(node.name, m.name)
        self._run_master(m, m.master.connected(link, self.w.now))
        self._run_slave(node, node.slave.connected(self.w.now))


class Links:
    def __init__(self, world: World):
        self.w = world
        self.open: dict[int, tuple[str, str]] = {}  # link id -> (slave, master)
        self._next = 1
        self._last_delivery: dict[tuple[int, str], int] = {}

    def connect(self, slave: str, master: str) -> int:
        link = self._next
        self._next += 1
        self.open[link] = (slave, master)
        return link

    def send(self, src: str, dst: str, msg: Any, link: int | None = None) -> None:
        """Deliver later, on a link in order; a cut drops the message and breaks its link."""
        w = self.w
        if (src, dst) in w.net.blocked:
            if link is not None:
                self.close(link, f"{src}->{dst} cut: a frame was lost")
            return
        t = w.now + w.rng.randint(w.net.min_delay_ms, w.net.max_delay_ms)
        if link is not None:
            key = (link, dst)
            t = max(t, self._last_delivery.get(key, 0))
            self._last_delivery[key] = t
        w.at(t - w.now, LinkDeliver(dst, link, msg))

    def to_slave(self, src: str, link: int, msg: Any) -> None:
        """From a master down one of its open links (dropped if it just closed)."""
        ends = self.open.get(link)
        if ends is not None:
            self.send(src, ends[0], msg, link)

    def to_master(self, src: str, link: int | None, msg: Any) -> None:
        """From a slave up its open link (dropped if it just closed)."""
        ends = self.open.get(link)
        if ends is not None:
            self.send(src, ends[1], msg, link)

    def close(self, link: int, reason: str) -> None:
        ends = self.open.pop(link, None)
        if ends is None:
            return
        slave, master = ends
        self.w.log(f"link {link} {slave}->{master} closed: {reason}")
        for end in (slave, master):
            self.w.at(self.w.rng.randint(1, 10), LinkClosed(end, link))

    def close_all(self, node: str, reason: str) -> None:
        for link, ends in list(self.open.items()):
            if node in ends:
                self.close(link, reason)
