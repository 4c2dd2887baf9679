"""Checkpoint mode with a control node group (three `ledgermq controlnode --peers` processes)
as real processes: kill -9 the master together with the control node group's leader. With
one control node nothing could elect until it was restarted; with a group, another node
leads, holds what the dead one had saved (the cache of sends it acknowledged included) and
promotes a slave by itself."""
import asyncio
import signal
import time

import pytest

from ledgermq.localcluster.cluster import down, restart, up
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from ..wait import wait_until
from .load import Sighting, acked_after, check_nothing_lost, read_all, under_load
from .test_checkpoint_mode import cached_then_killed, procs, single_master, wait_for_master, \
    wait_slave_caught_up

CONTROL = ("control0", "control1", "control2")


def control_leader(d) -> dict | None:
    """The control node that serves (the group's leader), or None."""
    st = procs(d)

    async def ask():
        client = RemotingClient()
        try:
            for name in CONTROL:
                p = st[name]
                try:
                    r = await client.invoke(f"{p['host']}:{p['port']}", RemotingCommand(
                        RequestCode.CONTROL_STATUS), 1.0)
                except Exception:  # noqa: BLE001 - down
                    continue
                if r.code == ResponseCode.SUCCESS:
                    return p
        finally:
            await client.close()
        return None
    return asyncio.run(ask())


@pytest.fixture
def group(tmp_path):
    d = tmp_path / "cpg"
    state = up("checkpoint", 3, d, {"checkpointSyncTimeoutMillis": "500"}, controllers=3)
    try:
        wait_for_master(d)
        for name in ("n1", "n2"):
            wait_slave_caught_up(d, name)
        wait_until(lambda: control_leader(d), "a control node leader")
        yield d, state
    finally:
        down(d)


def test_master_and_control_leader_killed_together_fail_over_without_a_restart(group):
    d, state = group
    old, leader = wait_for_master(d), control_leader(d)
    statuses: dict = {}
    with Sighting(lambda: single_master(d, not_name=old["name"]), "a new master") as seen:
        killed_at = time.monotonic() + 3
        acked = under_load(state["namesrv"], 12, "g", 3, (old["pid"], signal.SIGKILL, 0),
                           (leader["pid"], signal.SIGKILL, 0), statuses=statuses)
        new_master_at = seen.wait()
    # another control node led and promoted a slave, neither dead process restarted
    print(f"new master {new_master_at - killed_at:.2f} s after the kill")
    assert new_master_at - killed_at < 6.0, f"{new_master_at - killed_at:.1f} s: {statuses}"
    assert control_leader(d)["name"] != leader["name"]
    assert acked_after(acked, new_master_at), f"no SEND_OK on the new master: {statuses}"
    check_nothing_lost(acked, asyncio.run(read_all(state["namesrv"])))
    restart(d, leader["name"])  # back as a follower, catching up from the new leader
    restart(d, old["name"])  # rolls back past the takeover, rejoins as a slave
    wait_slave_caught_up(d, old["name"])


def test_sends_the_dead_leader_cached_are_kept_by_its_successor(group):
    d, state = group
    master = cached_then_killed(d, state, control_leader(d))
    wait_for_master(d, not_name=master["name"])  # no control node restarted
    bodies = {b for q in asyncio.run(read_all(state["namesrv"])).values() for b in q}
    assert {f"c-{i}".encode() for i in range(5)} <= bodies
