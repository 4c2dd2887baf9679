"""The two systems of the side-by-side benchmark (#29), each in one of the layouts, behind one
face: its name server's address, its server processes' PIDs, and for failover rows a kill -9
of the group's master (or leader), its restart, and a wait until the group is whole again.

ledgermq runs as `ledgermq dev` (single) or `ledgermq cluster up` (sync, dledger,
controller); Apache RocketMQ as bench/rocketmq_layouts.py writes it. The floor
(bench/request_floor.py, single layout only, no failover) is a side for request_bench.py.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Iterator, Protocol

from bench.request_floor import FloorSide
from bench.rocketmq_anchor import FrontProxy, RocketMQ
from bench.rocketmq_layouts import CLUSTER, GROUP
from ledgermq.client.admin import Admin
from ledgermq.localcluster.cluster import MASTER_ROLES, down, health, lag, restart, status, up
from tests.dev_process import DevProcess

ROOT = Path(__file__).resolve().parents[1]
SEGMENT = str(64 << 20)  # commit-log segments, as the RocketMQ layouts have them
CAUGHT_UP = 1 << 20  # bytes behind the master that count as caught up
# the ledgermq mode and replica count that match each RocketMQ layout
LEDGERMQ_LAYOUTS = {"sync": ("sync", 2), "dledger": ("dledger", 3),
                    "controller": ("controller", 3), "controller-tight": ("controller", 3)}


class Side(Protocol):
    system: str
    namesrv: str
    grpc: str  # the gRPC endpoint (the proxy layout), or ""

    def pids(self) -> dict[str, int]: ...
    def kill_master(self) -> str: ...
    def restart(self, name: str) -> None: ...
    def wait_whole(self, timeout: float = 120.0) -> None: ...


def _poll(check, what: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)  # polling the cluster's state, with a deadline
    raise RuntimeError(f"{what}: not within {timeout:.0f} s")


class LedgermqSide:
    system = "ledgermq"
    program: list[str] | None = None  # the `ledgermq` CLI (DevProcess's default)

    def __init__(self, layout: str, d: Path) -> None:
        self.layout, self.d, self.dev, self.grpc = layout, d, None, ""
        if layout in ("single", "proxy"):  # (ledgermq's broker serves gRPC itself)
            grpc = {"grpcServerPort": "0"} if layout == "proxy" else {}
            self.dev = DevProcess(d, {"mappedFileSizeCommitLog": SEGMENT, **grpc},
                                  self.program).start()
            self.namesrv, self.grpc = self.dev.namesrv, self.dev.ready.get("grpc") or ""
        else:
            mode, replicas = LEDGERMQ_LAYOUTS[layout]
            state = up(mode, replicas, d, {"mappedFileSizeCommitLog": SEGMENT},
                       controllers=3 if mode == "controller" else 1)
            self.namesrv = state["namesrv"]
            try:
                self.wait_whole()
            except BaseException:
                down(d)
                raise

    def pids(self) -> dict[str, int]:
        if self.dev:
            return {"dev": self.dev.proc.pid}
        return {p["name"]: p["pid"] for p in status(self.d)["processes"] if p["alive"]}

    def kill_master(self) -> str:
        master = next(p for p in status(self.d)["processes"]
                      if p["alive"] and p.get("role") in MASTER_ROLES)
        os.kill(master["pid"], signal.SIGKILL)
        return master["name"]

    def restart(self, name: str) -> None:
        restart(self.d, name)

    def wait_whole(self, timeout: float = 120.0) -> None:
        def whole() -> bool:  # (under load a follower is always a few messages behind)
            state = status(self.d)
            return health(state)[0] and all(
                (lag(state, p) or 0) < CAUGHT_UP for p in state["processes"] if "replPort" in p)
        _poll(whole, "ledgermq's group whole and caught up", timeout)

    def close(self) -> None:
        if self.dev:
            self.dev.stop()
        else:
            down(self.d)


class GrpcFloorSide(LedgermqSide):
    """ledgermq's endpoint with sends, receives and acks answered from canned answers
    (bench/grpc_floor_broker.py): the floor under the Java client's gRPC workloads."""
    system = "grpc-floor"
    program = [sys.executable, str(ROOT / "bench" / "grpc_floor_broker.py")]


class RocketMQSide:
    system = "rocketmq"

    def __init__(self, layout: str, d: Path) -> None:
        self.rmq = RocketMQ(d, layout).__enter__()
        self.namesrv = self.rmq.namesrv
        self.grpc = next((f"127.0.0.1:{n.proxy['grpcServerPort']}" for n in self.rmq.nodes
                          if n.proxy), "")

    def pids(self) -> dict[str, int]:
        return self.rmq.pids()

    def kill_master(self) -> str:
        node = self.rmq.node_at(asyncio.run(self.rmq.master()))
        self.rmq.kill(node.name)
        return node.name

    def restart(self, name: str) -> None:
        self.rmq.start_node(next(n for n in self.rmq.nodes if n.name == name))

    def wait_whole(self, timeout: float = 120.0) -> None:
        brokers = sum(n.kind in ("broker", "proxy") for n in self.rmq.nodes)

        async def registered() -> int:
            async with Admin(self.namesrv) as admin:
                table = (await admin.cluster_list())["brokerAddrTable"]
                addrs = table.get(GROUP, {}).get("brokerAddrs", {})
                return len(addrs) if "0" in addrs else 0
        _poll(lambda: asyncio.run(registered()) == brokers,
              "RocketMQ's group whole (every broker registered, one master)", timeout)

    def close(self) -> None:
        self.rmq.stop()


class ProxiedSide:
    """ledgermq behind RocketMQ's own proxy in cluster mode (the proxy layout only): RocketMQ
    5's clients reach `ledgermq dev` through the proxy, which speaks remoting to it (#33)."""
    system = "proxied"

    def __init__(self, layout: str, d: Path) -> None:
        assert layout == "proxy", layout
        self.dev = DevProcess(d / "ledgermq", {"mappedFileSizeCommitLog": SEGMENT}).start()
        try:
            self.front = FrontProxy(d / "proxy", front_of=self.dev.namesrv).__enter__()
        except BaseException:
            self.dev.stop()
            raise
        self.namesrv, self.grpc = self.dev.namesrv, self.front.grpc

    def pids(self) -> dict[str, int]:
        return {"dev": self.dev.proc.pid, **self.front.pids()}  # type: ignore[union-attr]

    def kill_master(self) -> str:
        raise NotImplementedError("the proxied side has no failover rows")

    def restart(self, name: str) -> None:
        raise NotImplementedError("the proxied side has no failover rows")

    def wait_whole(self, timeout: float = 120.0) -> None:
        pass

    def close(self) -> None:
        self.front.stop()
        self.dev.stop()


class RocketMQProxiedSide(ProxiedSide):
    """RocketMQ's own broker (and name server) behind its proxy in cluster mode: the same
    two hops as the proxied side, so the anchor for ledgermq behind that proxy (the proxy
    layout only; the "rocketmq" side there is its proxy and broker in one JVM)."""
    system = "rocketmq-proxied"

    def __init__(self, layout: str, d: Path) -> None:
        assert layout == "proxy", layout
        self.rmq = RocketMQ(d / "rocketmq", "single").__enter__()
        try:
            self.front = FrontProxy(d / "proxy", front_of=self.rmq.namesrv,
                                    cluster=CLUSTER).__enter__()
        except BaseException:
            self.rmq.stop()
            raise
        self.namesrv, self.grpc = self.rmq.namesrv, self.front.grpc

    def pids(self) -> dict[str, int]:
        return {**self.rmq.pids(), **self.front.pids()}

    def close(self) -> None:
        self.front.stop()
        self.rmq.stop()


SIDES = {"ledgermq": LedgermqSide, "rocketmq": RocketMQSide, "proxied": ProxiedSide,
         "rocketmq-proxied": RocketMQProxiedSide, "floor": FloorSide,
         "grpc-floor": GrpcFloorSide}


@contextlib.contextmanager
def side(system: str, layout: str, d: Path) -> Iterator[Side]:
    s: LedgermqSide | RocketMQSide | ProxiedSide | FloorSide = SIDES[system](layout, d)
    try:
        yield s
    finally:
        s.close()
