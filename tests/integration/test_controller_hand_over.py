"""The guards on a controller-mode hand-over asked for by clients' reports (real brokers and
a controller on 127.0.0.1): a master that a client still reaches stays; an idle one asks
the controller to elect the follower named, if it is in the SyncStateSet, once; a
stranger (without the cluster secret) is refused. The hand-over under a real client cut:
tests/chaos/test_client_hand_over.py."""
from __future__ import annotations

import asyncio

from ledgermq import Message, Producer
from ledgermq.localcluster.cluster import down
from ledgermq.remoting import RemotingCommand, RequestCode, ResponseCode

from ..wait import wait_until
from .test_controller_mode import full_set, procs
from .test_dledger_hand_over import addr, ask, handing_over, secret_of
from .test_transactions_failover import group_up, master


def follower_says(to: dict, follower: str, secret: str) -> RemotingCommand:
    return asyncio.run(ask(addr(to), RequestCode.CLIENTS_CANNOT_REACH_LEADER, secret,
                           brokerName="broker-a", follower=follower))


def test_an_idle_master_has_the_controller_elect_the_follower_named_once(tmp_path):
    d = tmp_path / "g"
    state = group_up("controller", d)  # (its SyncStateSet holds all three)
    try:
        key, first = secret_of(state), wait_until(lambda: master(d), "a master")
        ids = {n: str(p["brokerId"]) for n, p in procs(d).items() if "brokerId" in p}
        target = next(n for n in ids if n != first["name"])
        r = asyncio.run(ask(addr(first), RequestCode.CLIENTS_CANNOT_REACH_LEADER,
                            brokerName="broker-a", follower=ids[target]))
        assert r.code == ResponseCode.NO_PERMISSION, r.remark  # no cluster secret

        async def while_sending() -> RemotingCommand:
            async with Producer("p", state["namesrv"]) as p:
                await p.send(Message("HandOver", b"x"))  # a client connection, heard now
                return await ask(addr(first), RequestCode.CLIENTS_CANNOT_REACH_LEADER, key,
                                 brokerName="broker-a", follower=ids[target])
        r = asyncio.run(while_sending())
        assert r.ext["handingOver"] == "false" and "a client reached" in r.remark, r.remark

        r = follower_says(first, "99", key)
        assert r.ext["handingOver"] == "false" and "may take over" in r.remark, r.remark
        r = follower_says(first, ids[first["name"]], key)  # itself
        assert r.ext["handingOver"] == "false" and "may take over" in r.remark, r.remark

        # the producer left; once that is clientQuietMillis ago, the report moves the group
        wait_until(lambda: handing_over(follower_says(first, ids[target], key)),
                   "the quiet master hands over", 10)
        wait_until(lambda: (master(d) or {}).get("name") == target, f"{target} is master", 15)
        r = follower_says(first, ids[target], key)
        assert r.ext["handingOver"] == "false" and "not the leader" in r.remark, r.remark
        # the old master follows the new one and rejoins the set; the new master is just
        # as idle and hands back once, then the first refuses another within 30 s
        full_set(state)  # (the master learns the set just after the controller applied it)
        now_master = wait_until(lambda: master(d), "one master", 10)
        wait_until(lambda: follower_says(now_master, ids[first["name"]], key).ext[
            "handingOver"] == "true", "the new master hands back", 10)
        wait_until(lambda: (master(d) or {}).get("name") == first["name"],
                   "the first master is master again", 15)
        full_set(state)
        r = follower_says(master(d), ids[target], key)
        assert r.ext["handingOver"] == "false" and "handed over" in r.remark, r.remark
    finally:
        down(d)
