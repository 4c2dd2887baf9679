"""DLedger, controller and checkpoint mode on test hosts: a master that keeps its peers but
cannot take writes, either because its producers are cut off from it or because its disk
is full. Raft, the controller or the control node sees a healthy master, so before, every
send waited for the heal or for space. Now the master hands the group to a follower (a
DLedger leadership transfer; an election by the controller; a failover by the control
node), and the sends are acknowledged again before the fault ends:
- cut: ledgermq's client tells the followers that the master does not answer, and the
  master, reached by no client, hands over (client_handover.py);
- disk-full: the master's store refuses writes for a full disk, and it hands over
  (disk_handover.py). Each broker's store is a small tmpfs; the master's is filled.
Needs root; skips saying why otherwise."""
from __future__ import annotations

import asyncio
import time

import pytest

from ledgermq.chaos import TestNet, available, layout
from ledgermq.chaos.disk import fill, unfill
from ledgermq.chaos.store_faults import small_disks
from ledgermq.localcluster.cluster import down

from ..integration.load import acked_after, check_nothing_lost, read_all, send_for
from ..integration.test_checkpoint_mode import _members
from ..integration.test_controller_mode import full_set
from ..integration.test_transactions_failover import master
from ..wait import wait_until

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

CUT_AT_S = 3.0  # into the load
SEND_FOR_S = 14.0  # the fault lasts the rest of it: its end cannot be what ends the wait
BACK_WITHIN_S = 6.0  # from the cut to the next SEND_OK (the leader hears nothing for 2 s)


@pytest.mark.parametrize("fault", ["cut", "disk-full"])
@pytest.mark.parametrize("mode", ["dledger", "controller", "checkpoint"])
def test_a_master_that_cannot_take_writes_hands_over_to_a_follower(tmp_path, mode, fault):
    d = tmp_path / "cluster"
    brokers = [n for n, role in layout.hosts(mode, 3).items() if role.startswith("broker")]
    disks = brokers if fault == "disk-full" else []
    with small_disks(d, disks), TestNet(list(layout.hosts(mode, 3))) as net:
        state = layout.up_on(net, mode, 3, d)
        try:
            # a follower may take over once in the SyncStateSet, or the checkpoint's members
            if mode == "controller":
                full_set(state)
            elif mode == "checkpoint":
                wait_until(lambda: len(_members(d)) == 2, "two checkpoint members", 30)
            first = wait_until(lambda: master(d), "a master", 30)["name"]
            acked: list = []
            cut: list[float] = []
            ended: list[float] = []

            async def scenario():
                sender = asyncio.create_task(send_for(state["namesrv"], SEND_FOR_S, acked,
                                                      "cut"))
                await asyncio.sleep(CUT_AT_S)  # the fault schedule, not a wait
                cut.append(time.monotonic())
                if fault == "cut":
                    net.cut_clients(first)
                else:
                    await asyncio.to_thread(fill, d / first / "store")
                await sender
                ended.append(time.monotonic())
            asyncio.run(scenario())
            # the sends in flight at the cut may still be answered: the longest time
            # without a SEND_OK from the cut to the end of the load is what counts
            times = [cut[0]] + [a.at for a in acked_after(acked, cut[0])] + [ended[0]]
            gaps = [b - a for a, b in zip(times, times[1:])]
            print(f"{mode}, {fault}: no SEND_OK for at most {max(gaps):.2f} s")
            assert max(gaps) <= BACK_WITHIN_S, f"no SEND_OK for {max(gaps):.1f} s"
            now = wait_until(lambda: master(d), "a master", 15)
            assert now["name"] != first, now
            net.heal()
            unfill(d / first / "store")
            check_nothing_lost(acked, asyncio.run(read_all(state["namesrv"])))
        finally:
            net.heal()
            down(d)
