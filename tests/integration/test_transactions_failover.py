"""A transaction left open across a failover (real 3-broker groups, DLedger and controller
mode): the half message sent to the old master is in the replicated log, the new master
checks it back with a live producer of its group, and a consumer sees it exactly once."""
import asyncio
import os
import signal

import pytest

from ledgermq import LocalTransactionState, Message, TransactionProducer
from ledgermq.localcluster.cluster import MASTER_ROLES, down, status, up

from ..wait import until, wait_until
from .load import read_all
from .test_controller_mode import full_set

COMMIT, UNKNOW = LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.UNKNOW
TOPIC = "FailoverTx"


def group_up(mode: str, d, extra: dict | None = None) -> dict:
    """A 3-broker group of `mode`, every broker able to take over: in controller mode the
    controller elects only from the SyncStateSet, so a master killed before its slaves
    joined it has no successor."""
    state = up(mode, 3, d, extra, **({"controllers": 3} if mode == "controller" else {}))
    if mode == "controller":
        full_set(state)
    return state


def master(d, not_name=None):
    live = [p for p in status(d)["processes"] if p.get("role") in MASTER_ROLES and p["alive"]
            and p["name"] != not_name]
    return live[0] if len(live) == 1 else None


# controller mode in the slow run (make test-slow): the same path, a second election protocol
@pytest.mark.parametrize("mode", ["dledger", pytest.param("controller", marks=pytest.mark.slow)])
def test_an_open_transaction_is_settled_by_the_new_master(tmp_path, mode):
    d = tmp_path / mode
    # the check-back waits past the failover: the old master must not settle it first
    state = group_up(mode, d, {"transactionTimeOut": "3000",
                               "transactionCheckInterval": "300"})
    try:
        ns = state["namesrv"]
        old = wait_until(lambda: master(d), "a master")

        async def main():
            async with TransactionProducer("tx-fo", ns, check=lambda h: COMMIT,
                                           send_timeout=10) as p:
                r, _ = await p.send_in_transaction(Message(TOPIC, b"open"), lambda m, a: UNKNOW)
                assert r.status.value == "SEND_OK"
                os.kill(old["pid"], signal.SIGKILL)
                await until(lambda: asyncio.to_thread(master, d, old["name"]), "a new master",
                            timeout=30, interval=0.2)  # status() runs a loop of its own
                # a transaction of its own after the failover: its heartbeat tells the new
                # master this group is live (where it sends, as RocketMQ's clients do)
                await until(lambda: _committed(p), "a send through the new master",
                            timeout=30, interval=0.5)
                await until(lambda: _has(ns, 2), "the open transaction committed",
                            timeout=30, interval=0.2)
                assert sorted(await _bodies(ns)) == [b"after", b"open"]
        asyncio.run(main())
    finally:
        down(d)


async def _committed(p: TransactionProducer) -> bool:
    try:
        r, _ = await p.send_in_transaction(Message(TOPIC, b"after"), lambda m, a: COMMIT)
    except Exception:  # noqa: BLE001 - the route may still name the dead master
        return False
    return r.status.value == "SEND_OK"


async def _bodies(ns: str) -> list[bytes]:
    return [b for q in (await read_all(ns, topic=TOPIC)).values() for b in q]


async def _has(ns: str, n: int) -> bool:
    return len(await _bodies(ns)) >= n
