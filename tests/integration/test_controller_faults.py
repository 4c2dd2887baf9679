"""Controller mode (S1) through the fault sequence of chaos seed 5 (#28), shortened to
what broke it, as real processes: 2 brokers, 3 controllers, sends between the faults.

1. corrupt the master's flushed log (kill -9, bytes zeroed): the other broker takes over
   in epoch 2; the damaged one restarts, cuts its log to its last good message, follows;
2. kill the master and the controller leader together: the first broker leads epoch 3;
   the killed one restarts and follows with nothing cut, because it still knows the
   epoch 2 it copied (it forgot, and cut away 300 KB both held alike);
3. pause the master past the controller's timeout: the other takes over in epoch 4; the
   paused one wakes still saying it is the master and re-registers, and the route must
   keep naming the real master (it lost the group's topics until the next registration);
and nothing acknowledged is lost, all of it readable from the route's queues."""
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time

from ledgermq.chaos.disk import commitlog_dir, damage_flushed, read_flushed
from ledgermq import MQClientError
from ledgermq.client.admin import Admin
from ledgermq.localcluster.cluster import down, restart, status, up
from ledgermq.controller.client import ControllerClient

from ..wait import wait_until
from .load import read_all


def procs(d):
    return {p["name"]: p for p in status(d)["processes"]}


def master(d) -> str | None:
    return next((n for n, p in procs(d).items() if p.get("role") == "MASTER" and p["alive"]),
                None)


def set_of(state) -> list:
    async def go():
        async with ControllerClient(state["controllerAddr"]) as c:
            return (await c.sync_state_set(["broker-a"]))["broker-a"]["syncStateSet"]
    return asyncio.run(go())


def send(ns, n, tag) -> list[bytes]:
    from ledgermq import Message, Producer

    async def go():
        acked = []
        async with Producer("p-" + tag, ns, retry_times=3, send_timeout=3) as p:
            for i in range(n):
                body = f"{tag}-{i}".encode()
                if (await p.send(Message("Replicated", body))).status.value == "SEND_OK":
                    acked.append(body)
        return acked
    return asyncio.run(go())


def cuts(d, node) -> list[str]:
    return [ln for ln in (d / node / "server.log").read_text().splitlines()
            if "truncating the log" in ln]


def controller_leader(d, state) -> str:
    out = subprocess.run([sys.executable, "-m", "ledgermq", "admin", "getControllerMetaData",
                          "-a", state["controllerAddr"], "--json"],
                         capture_output=True, text=True, timeout=30)
    leader = next(m["address"] for m in json.loads(out.stdout) if m.get("isLeader"))
    return next(n for n, p in procs(d).items() if f"127.0.0.1:{p['port']}" == leader)


def route_masters(ns, seconds) -> list:
    """Poll the topic's route for `seconds`: each poll's (master address, groups with
    queues) of broker-a."""
    async def go():
        seen, end = [], time.monotonic() + seconds
        async with Admin(ns) as admin:
            while time.monotonic() < end:
                try:
                    r = await admin.topic_route("Replicated")
                except MQClientError as e:  # TOPIC_NOT_EXIST: the group's topics left
                    seen.append((None, [str(e)]))
                    continue
                addrs = {bd["brokerName"]: bd["brokerAddrs"] for bd in r["brokerDatas"]}
                seen.append((addrs.get("broker-a", {}).get("0"),
                             [q["brokerName"] for q in r["queueDatas"]]))
                await asyncio.sleep(0.05)  # the polling rate, not a wait
        return seen
    return asyncio.run(go())


def test_corrupt_failover_combined_kill_and_a_deposed_master_waking(tmp_path):
    d = tmp_path / "ctl"
    # registrations every 2 s: a deposed master that wakes registers at once, as one paused
    # past the default 30 s does
    state = up("controller", 2, d, controllers=3, extra={"registerNameServerPeriod": "2000"})
    ns = state["namesrv"]
    try:
        wait_until(lambda: len(set_of(state)) == 2, "a SyncStateSet of 2")
        acked = send(ns, 200, "a")
        # 1. corruption of the master's flushed bytes
        m0 = master(d)
        store = d / m0 / "store"
        wait_until(lambda: (read_flushed(commitlog_dir(store)) or 0) > 16384,
                   f"{m0} flushed what it took")
        os.kill(procs(d)[m0]["pid"], signal.SIGKILL)
        wait_until(lambda: not procs(d)[m0]["alive"], f"{m0} is dead")
        assert damage_flushed(store, read_flushed(commitlog_dir(store)), 4096, "zero",
                              random.Random(5)) is not None
        m1 = wait_until(lambda: (m := master(d)) not in (None, m0) and m, "a new master")
        restart(d, m0)
        wait_until(lambda: procs(d)[m0].get("role") == "SLAVE", f"{m0} follows")
        acked += send(ns, 200, "b")
        wait_until(lambda: len(set_of(state)) == 2, f"{m0} back in the set")
        # 2. the master and the controller leader killed together
        ctl = controller_leader(d, state)
        os.kill(procs(d)[ctl]["pid"], signal.SIGKILL)
        os.kill(procs(d)[m1]["pid"], signal.SIGKILL)
        wait_until(lambda: master(d) == m0, f"{m0} leads again", timeout=60)
        restart(d, ctl)
        before = cuts(d, m1)
        restart(d, m1)
        wait_until(lambda: procs(d)[m1].get("role") == "SLAVE", f"{m1} follows")
        acked += send(ns, 200, "c")
        wait_until(lambda: len(set_of(state)) == 2, f"{m1} back in the set")
        assert cuts(d, m1) == before, "a replica holding the master's bytes cut them"
        # 3. the master paused past the controller's timeout, then woken
        pid = procs(d)[m0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: procs(d)[m1].get("role") == "MASTER", f"{m1} takes over",
                       timeout=60)
            new_addr = f"127.0.0.1:{procs(d)[m1]['port']}"
            wait_until(lambda: route_masters(ns, 0.01)[0][0] == new_addr,
                       "the route names the new master")
        finally:
            os.kill(pid, signal.SIGCONT)
        seen = route_masters(ns, 4.0)
        wrong = [s for s in seen if s[0] != new_addr or "broker-a" not in s[1]]
        assert not wrong, f"{len(wrong)} of {len(seen)} route reads without the real " \
                          f"master of broker-a ({new_addr}): {wrong[:3]}"
        acked += send(ns, 200, "d")
        have = {b for q in asyncio.run(read_all(ns)).values() for b in q}
        lost = [b for b in acked if b not in have]
        assert len(acked) >= 700 and not lost, f"{len(lost)} of {len(acked)} lost"
    finally:
        down(d)
