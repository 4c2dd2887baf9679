"""The cluster secret on the remoting-based internal links, over real sockets: DLedger
peers, the controller, the control node and a checkpoint-mode broker's promotion. Peers
with the secret work as before; a peer with another secret cannot even connect, and the
requests of one without are refused (NO_PERMISSION and the reason, or dropped when
oneway), leaving the state they aimed at untouched."""
import asyncio

import pytest

from ledgermq.localcluster.cluster import free_ports
from ledgermq.controller.client import ControllerClient, ControllerError
from ledgermq.controlnode import ControlNode
from ledgermq.drivers.control_node import ControlNodeClient
from ledgermq.drivers.raft import encode_message
from ledgermq.peer_auth.core import NO_AUTH, UNEXPECTED, WRONG_SECRET, PeerAuth
from ledgermq.remoting import (
    RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode,
)
from ledgermq.peer_auth.remoting import PeerAuthError, PeerGate
from ledgermq.replication.raft import Entry, Push, PushType, VoteRequest

from ..controller.test_controller_server import REGISTER, broker_in_controller_mode, controller
from ..wait import until
from .test_dledger_driver import append, log_bytes, start_group, stop_group

SECRET = "s3cret-of-cluster-one"
OTHER = "another-cluster-secret"


def client(secret: str = "") -> RemotingClient:
    return RemotingClient(authenticate=PeerGate(PeerAuth(secret), "test").authenticate)


# ---- DLedger peers --------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("secret", [SECRET, ""])
def test_forged_raft_messages_move_nothing_on_a_group_with_the_secret(tmp_path, secret):
    """A stranger's VoteRequest and AppendEntries (a Push) from a higher term: a group
    without a secret takes them (the attack is real), one with the secret drops them."""
    async def run():
        drivers, leader = await start_group(tmp_path, auth=PeerAuth(secret))
        try:
            follower = next(d for d in drivers if d is not leader)
            term, end, data = follower.node.term, follower.log.end, log_bytes(follower)
            addr = follower.peers[follower.self_id]
            if secret:  # another cluster's secret: not even a connection
                with pytest.raises(PeerAuthError, match="wrong cluster secret"):
                    await client(OTHER).connection(addr)
            stranger = RemotingClient()  # no secret: it just sends
            vote = VoteRequest(src=leader.self_id, dst=follower.self_id, term=term + 50,
                               last_index=end + 100, last_term=term + 50)
            push = Push(src=leader.self_id, dst=follower.self_id, term=term + 60,
                        kind=PushType.APPEND, index=end + 1, prev_term=term,
                        entries=(Entry(end + 1, term + 60, b"forged"),), commit=end + 1)
            await stranger.invoke_oneway(addr, encode_message(vote))
            await stranger.invoke_oneway(addr, encode_message(push))
            if not secret:
                await until(lambda: follower.node.term >= term + 50, "the forged term taken")
                await stranger.close()
                return
            await until(lambda: follower.gate.auth.refused[NO_AUTH] >= 2, "both refused")
            await stranger.close()
            assert follower.node.term == term and follower.log.end == end
            assert log_bytes(follower) == data
            # and the group itself still replicates, authenticated
            done = await asyncio.wait_for(leader.propose_range(*append(leader.store, 1)), 10)
            assert done.code.name == "SUCCESS"
            await until(lambda: follower.log.end > end, "the follower took the real entry")
            assert follower.node.term == term
        finally:
            await stop_group(drivers)
    asyncio.run(run())


@pytest.mark.timeout(60)
def test_a_peer_without_the_secret_is_told_and_tells(tmp_path, caplog):
    """A DLedger peer with a secret asking one without: both log what is wrong."""
    ports = free_ports(2)

    async def run():
        from .test_dledger_driver import open_driver
        peers = {"n0": f"127.0.0.1:{ports[0]}", "n1": f"127.0.0.1:{ports[1]}"}
        a = open_driver(tmp_path, "n0", peers, auth=PeerAuth(SECRET))
        b = open_driver(tmp_path, "n1", peers)  # no secret
        await a.start()
        await b.start()
        try:
            await until(lambda: b.gate.auth.refused[UNEXPECTED] and a.gate.auth.refused[NO_AUTH],
                        "each side refused the other")
            assert a.node.role.name != "LEADER" or a.node.commit < 0  # no quorum formed
        finally:
            for d in (a, b):
                await d.stop()
                d.store.close()
    asyncio.run(run())
    assert "it authenticates with a cluster secret and this server has none" in caplog.text
    assert "refused our authentication" in caplog.text


# ---- the controller -------------------------------------------------------------------
def test_a_broker_without_the_secret_cannot_register_nor_elect(tmp_path, caplog):
    port = free_ports(1)[0]
    addr = f"127.0.0.1:{port}"

    async def go():
        c = controller(tmp_path, port, clusterSecret=SECRET)
        await c.start()
        try:
            await until(lambda: c.is_leader, "the controller leads")
            async with ControllerClient(addr) as stranger:
                with pytest.raises(ControllerError, match="requires the cluster secret"):
                    await stranger.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
                with pytest.raises(ControllerError, match="requires the cluster secret"):
                    await stranger.call(RequestCode.BROKER_HEARTBEAT, {
                        "brokerName": "g", "brokerId": 1})
                # reads stay open (admin tools, the console), the secret is not shown
                config = await stranger.config()
                assert config["clusterSecret"] == "(hidden)"
            async with ControllerClient(addr, auth=PeerAuth(OTHER)) as wrong:
                with pytest.raises(ControllerError, match="wrong cluster secret"):
                    await wrong.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
            assert c.core.metadata.groups == {}  # nothing registered
            assert c.gate.auth.refused[NO_AUTH] == 2 and c.gate.auth.refused[WRONG_SECRET] == 1
            async with ControllerClient(addr, auth=PeerAuth(SECRET)) as broker:
                view = await broker.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
                assert view["brokerId"] == 1
                assert (await broker.elect_master("g"))["masterBrokerId"] == 1
        finally:
            await c.stop()
    asyncio.run(go())
    assert "controller: peer 127.0.0.1" in caplog.text and "wrong cluster secret" in caplog.text


def test_the_controller_in_the_name_server_asks_the_secret_on_its_port(tmp_path):
    """enableControllerInNamesrv: brokers reach the controller through the name server's
    port, whose connections authenticate the same way."""
    from ledgermq.namesrv import NamesrvConfig, NameServer
    ns_port, ctl_port = free_ports(2)

    async def go():
        ns = NameServer(NamesrvConfig(listenPort=ns_port))
        ns.controller = controller(tmp_path, ctl_port, clusterSecret=SECRET)
        await ns.start()
        try:
            await until(lambda: ns.controller.is_leader, "the embedded controller leads")
            async with ControllerClient(ns.address) as stranger:
                with pytest.raises(ControllerError, match="requires the cluster secret"):
                    await stranger.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
            b = broker_in_controller_mode(tmp_path, ns.address, clusterSecret=SECRET)
            await b.start()
            try:
                await until(lambda: b.mode.is_master, "the broker with the secret is master")
            finally:
                await b.stop()
            assert list(ns.controller.core.metadata.groups) == ["broker-a"]
        finally:
            await ns.stop()
    asyncio.run(go())


# ---- the control node and a broker's promotion ------------------------------------------
HEARTBEAT = {"haAddr": "127.0.0.1:2", "brokerAddr": "127.0.0.1:1", "wantsMaster": "true",
             "epoch": "0", "maxOffset": "0"}


def test_a_fake_broker_cannot_heartbeat_nor_cache_at_the_control_node(tmp_path):
    async def go():
        node = ControlNode(tmp_path / "cn", "127.0.0.1", 0, auth=PeerAuth(SECRET))
        await node.start()
        addr = f"127.0.0.1:{node.port}"
        try:
            fake = ControlNodeClient(addr, "g")
            with pytest.raises(RemotingError, match="requires the cluster secret"):
                await fake.heartbeat(HEARTBEAT)
            assert not await fake.cache(1, 0, 10, "id", b"x" * 10)
            await fake.close()
            wrong = ControlNodeClient(addr, "g", PeerAuth(OTHER))
            with pytest.raises(PeerAuthError, match="wrong cluster secret"):
                await wrong.heartbeat(HEARTBEAT)
            await wrong.close()
            assert node.groups == {}  # no group, no checkpoint, no cache was touched
            assert node.auth.refused[NO_AUTH] == 2 and node.auth.refused[WRONG_SECRET] == 1
            # producers' resolve and the status stay open
            r = await RemotingClient().invoke(addr, RemotingCommand(RequestCode.CONTROL_STATUS))
            assert r.code == ResponseCode.SUCCESS
            real = ControlNodeClient(addr, "g", PeerAuth(SECRET))
            view = await real.heartbeat(HEARTBEAT)
            assert view.role == "MASTER" and "g" in node.groups
            # only a peer may ask for a failover of the group: a stranger is refused
            fake = ControlNodeClient(addr, "g")
            assert "requires the cluster secret" in await fake.hand_over(
                HEARTBEAT["haAddr"], view.epoch, 2)
            await fake.close()
            assert await real.hand_over(HEARTBEAT["haAddr"], view.epoch, 2) == \
                "no hand-over of g: no live slave holds the checkpoint"
            assert node.groups["g"].state.master == view.slot
            await real.close()
        finally:
            await node.stop()
    asyncio.run(go())


def test_a_broker_takes_a_promotion_only_from_an_authenticated_peer(tmp_path):
    """CONTROL_PROMOTE on a checkpoint-mode broker's port: refused without the secret."""
    from ledgermq.broker import Broker, load_broker_config
    ports = free_ports(2)

    async def go():
        bcfg, scfg, _ = load_broker_config(None, {
            "brokerName": "g", "listenPort": str(ports[0]), "haListenPort": str(ports[1]),
            "namesrvAddr": "127.0.0.1:1", "storePathRootDir": str(tmp_path / "b"),
            "enableConsistentCheckpoint": "true", "controlNodeAddr": "127.0.0.1:1",
            "brokerRole": "SLAVE", "clusterSecret": SECRET})
        broker = Broker(bcfg, scfg)
        await broker.start()
        try:
            promote = RemotingCommand(RequestCode.CONTROL_PROMOTE, ext={
                "brokerName": "g", "epoch": "7", "checkpoint": "0", "members": "[]"})
            r = await RemotingClient().invoke(broker.address, promote)
            assert r.code == ResponseCode.NO_PERMISSION and "cluster secret" in r.remark
            assert broker.mode.replica.epoch != 7 and not broker.mode.is_writable
            assert broker.peer_auth.refused[NO_AUTH] == 1
            with pytest.raises(PeerAuthError, match="wrong cluster secret"):
                await client(OTHER).connection(broker.address)
            r = await client(SECRET).invoke(broker.address, RemotingCommand(
                RequestCode.CONTROL_PROMOTE, ext={"brokerName": "g"}))
            assert "missing field 'epoch'" in r.remark  # let in: read, found incomplete
        finally:
            await broker.stop()
    asyncio.run(go())
