"""The guards on a DLedger hand-over asked for by clients' reports (real brokers on
127.0.0.1): a leader that a client still reaches stays; an idle one hands over once, then
not again within HAND_OVER_EVERY_S; an operator's preferredLeaderId outranks the reports;
a report for another group, or from a stranger (without the cluster secret), is refused.
The hand-over under a real client cut: tests/chaos/test_client_hand_over.py."""
from __future__ import annotations

import asyncio

from ledgermq import Message, Producer
from ledgermq.localcluster.cluster import down, up
from ledgermq.peer_auth.core import PeerAuth, load_secret
from ledgermq.peer_auth.remoting import PeerGate
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from ..wait import wait_until
from .test_dledger import leader_of, single_leader


def addr(p: dict) -> str:
    return f"{p.get('host', '127.0.0.1')}:{p['port']}"


async def ask(to: str, code: int, secret: str = "", **ext: str) -> RemotingCommand:
    """One request; proving the cluster secret first when given one (as a follower does)."""
    client = RemotingClient(authenticate=PeerGate(PeerAuth(secret), "test").authenticate)
    try:
        return await client.invoke(to, RemotingCommand(code, ext=ext), 5.0)
    finally:
        await client.close()


def follower_says(leader: dict, follower: str, secret: str) -> RemotingCommand:
    return asyncio.run(ask(addr(leader), RequestCode.CLIENTS_CANNOT_REACH_LEADER, secret,
                           brokerName="broker-a", follower=follower))


def handing_over(r: RemotingCommand) -> bool:
    """A report's answer once the quiet master has started handing over: on this report,
    or on the look again an earlier one scheduled while the quiet had not lasted yet (then
    this one finds the hand-over made, or done)."""
    return r.ext.get("handingOver") == "true" or "handed over" in str(r.remark) or \
        "not the leader" in str(r.remark)


def secret_of(state: dict) -> str:
    return load_secret("", state["clusterSecretFile"])


def other_node(leader: dict) -> str:
    return next(n for n in ("n0", "n1", "n2") if n != leader["name"])


def test_a_reached_leader_stays_and_an_idle_one_hands_over_once(tmp_path):
    d = tmp_path / "g"
    state = up("dledger", 3, d)
    try:
        first, key = leader_of(d), secret_of(state)
        target = other_node(first)
        # a stranger (no cluster secret) is refused, whatever the leader's state
        r = asyncio.run(ask(addr(first), RequestCode.CLIENTS_CANNOT_REACH_LEADER,
                            brokerName="broker-a", follower=target))
        assert r.code == ResponseCode.NO_PERMISSION, r.remark

        async def while_sending() -> RemotingCommand:
            async with Producer("p", state["namesrv"]) as p:
                await p.send(Message("HandOver", b"x"))  # a client connection, heard now
                return await ask(addr(first), RequestCode.CLIENTS_CANNOT_REACH_LEADER, key,
                                 brokerName="broker-a", follower=target)
        r = asyncio.run(while_sending())
        assert r.code == ResponseCode.SUCCESS and r.ext["handingOver"] == "false", r.remark
        assert "a client reached this leader" in r.remark
        assert single_leader(d)["name"] == first["name"]

        r = follower_says(first, "nobody", key)
        assert r.ext["handingOver"] == "false" and "not a follower" in r.remark, r.remark

        # the producer left; once that is clientQuietMillis ago (its goodbye was a sign:
        # tests/broker/test_client_handover.py), the report moves leadership there
        wait_until(lambda: handing_over(follower_says(first, target, key)),
                   "the quiet leader hands over", 10)
        wait_until(lambda: (single_leader(d) or {}).get("name") == target, f"{target} leads",
                   15)
        # the old leader no longer decides; the new one, just as idle, hands back once (its
        # own first), and then the first refuses another within 30 s of its hand-over
        again = follower_says(first, target, key)
        assert again.ext["handingOver"] == "false" and "not the leader" in again.remark
        back = follower_says(leader_of(d), first["name"], key)
        assert back.ext["handingOver"] == "true", back.remark
        wait_until(lambda: (single_leader(d) or {}).get("name") == first["name"],
                   "the first leader leads again", 15)
        r = follower_says(leader_of(d), target, key)
        assert r.ext["handingOver"] == "false" and "handed over" in r.remark, r.remark
    finally:
        down(d)


def test_a_report_for_another_group_is_refused_and_the_operator_decides(tmp_path):
    d = tmp_path / "g"
    state = up("dledger", 3, d, {"preferredLeaderId": "n1"})
    key = secret_of(state)
    try:
        lead = wait_until(lambda: (p := single_leader(d)) and p["name"] == "n1" and p,
                          "n1 leads (preferredLeaderId)", 20)
        r = follower_says(lead, "n2", key)
        assert r.ext["handingOver"] == "false" and "preferredLeaderId" in r.remark, r.remark
        r = asyncio.run(ask(addr(lead), RequestCode.REPORT_MASTER_UNREACHABLE,
                            brokerName="broker-zz", masterAddr="1.2.3.4:1"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "broker-zz" in r.remark, r.remark
    finally:
        down(d)
