"""What counts as a client reaching a master, for the hand-over on clients' reports: a
byte from a connected client, and a client closing its connection (CI saw a checkpoint
master whose slaves had been frozen hand its group over on a report a follower passed on
late, after the client that made it had left, answered). A close of our own is no sign."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.modes.client_handover import ClientHandOver, GroupRole
from ledgermq.peer_auth.core import PeerAuth
from ledgermq.remoting import RemotingClient, RemotingServer


def hand_over(left_at: float) -> ClientHandOver:
    host = SimpleNamespace(config=BrokerConfig(), peer_auth=PeerAuth(),
                           client_connections=lambda: [], client_left_at=left_at)
    return ClientHandOver(host, "test", lambda: GroupRole(True, "a", frozenset({"b"})),
                          lambda follower: None)


def test_a_client_that_left_just_now_reached_the_master():
    async def go():
        assert hand_over(time.monotonic() - 0.5)._why_not("b") == \
            "a client reached this leader 0.5 s ago"
        assert hand_over(time.monotonic() - 5)._why_not("b") is None
        assert hand_over(float("-inf"))._why_not("b") is None  # nobody ever came
    asyncio.run(go())


def test_a_connection_the_peer_closed_is_a_sign_from_it_one_we_closed_is_not():
    async def go():
        server = RemotingServer(lambda cmd, conn: None, "127.0.0.1", 0)
        await server.start()
        addr = f"127.0.0.1:{server.port}"
        try:
            for ours in (False, True):
                client = RemotingClient()
                await client.connection(addr)
                conn = await _one_connection(server)
                opened = conn.last_active
                if ours:
                    conn.close()
                else:
                    await client.close()
                await asyncio.wait_for(conn.closed, 5)
                assert conn.closed_by_us is ours
                assert (conn.last_active > opened) is not ours
                await client.close()
        finally:
            await server.stop()
    asyncio.run(go())


async def _one_connection(server):
    for _ in range(500):
        if server.connections:
            return next(iter(server.connections))
        await asyncio.sleep(0.01)
    raise AssertionError("no connection")


def _report(h: ClientHandOver):
    from ledgermq.remoting import RemotingCommand, RequestCode
    return h.follower_report(RemotingCommand(RequestCode.CLIENTS_CANNOT_REACH_LEADER, ext={
        "brokerName": h.config.brokerName, "follower": "b"}), None)


def _master(quiet_s: float, handed: list) -> ClientHandOver:
    host = SimpleNamespace(config=BrokerConfig(), peer_auth=PeerAuth(),
                           client_connections=lambda: [],
                           client_left_at=time.monotonic() - quiet_s)
    return ClientHandOver(host, "test", lambda: GroupRole(True, "a", frozenset({"b"})),
                          lambda follower: handed.append((follower, time.monotonic())))


def test_a_report_a_little_early_hands_over_once_the_quiet_has_lasted():
    """A report that comes 1.5 s into the clients' quiet (clientQuietMillis 2 s) is
    refused, and the master hands over half a second later, not at a next report: the
    clients report a second apart, a follower passes one on at most once a second, and CI
    saw a cut-off checkpoint master wait 6 s for the report that came late enough."""
    async def go():
        handed: list = []
        h = _master(1.5, handed)
        reported = time.monotonic()
        assert _report(h).ext["handingOver"] == "false" and not handed
        assert _report(h).ext["handingOver"] == "false"  # (one look pending, not two)
        deadline = time.monotonic() + 3
        while not handed and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert [f for f, _ in handed] == ["b"]
        assert 0.45 <= handed[0][1] - reported <= 1.5  # once 2 s of quiet had passed
        assert h.hand_overs == 1
        await h.stop()
    asyncio.run(go())


def test_a_client_that_comes_before_the_look_keeps_its_master():
    async def go():
        handed: list = []
        h = _master(1.7, handed)
        assert _report(h).ext["handingOver"] == "false"
        h.host.client_left_at = time.monotonic()  # a client reached it meanwhile
        deadline = time.monotonic() + 3
        while h._look is not None and time.monotonic() < deadline:  # until it looked
            await asyncio.sleep(0.02)
        assert h._look is None and handed == [] and h.hand_overs == 0
        await h.stop()
    asyncio.run(go())


def test_a_master_whose_mode_refuses_does_not_look_again():
    """Only the quiet is waited for: a mode that will not hand over (an operator's
    preferredLeaderId) is asked again at the next report, not on a timer."""
    async def go():
        host = SimpleNamespace(config=BrokerConfig(), peer_auth=PeerAuth(),
                               client_connections=lambda: [], client_left_at=float("-inf"))
        h = ClientHandOver(host, "test", lambda: GroupRole(True, "a", frozenset({"b"})),
                           lambda follower: "preferredLeaderId is set")
        assert _report(h).remark == "preferredLeaderId is set"
        assert h._look is None
        await h.stop()
    asyncio.run(go())
