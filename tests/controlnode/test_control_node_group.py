"""A control node group (three ReplicatedControlNode on real sockets and files): the leader
alone serves, a broker's link finds it from any address, and what it saved (the group's
master, a cached message) is there on the node that leads after it stops. A node that
missed the log while down catches up, from a snapshot once the log was compacted."""
import asyncio

import pytest

from ledgermq.controlnode.replicated import ReplicatedControlNode
from ledgermq.drivers.control_node import ControlNodeClient, control_node_addrs
from ledgermq.localcluster.cluster import free_ports
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.replication.checkpoint import Resolution

from ..wait import until

HEARTBEAT = {"haAddr": "10.0.0.1:10912", "brokerAddr": "10.0.0.1:10911", "wantsMaster": "true",
             "epoch": "0", "maxOffset": "0"}


def _group(tmp_path, ports, ids=("c0", "c1", "c2")):
    peers = {i: f"127.0.0.1:{p}" for i, p in zip(ids, ports)}
    return peers, {i: ReplicatedControlNode(i, peers, tmp_path / i) for i in ids}


def _cache(node):
    g = node.saved.groups.get("broker-a")
    return g.cache if g else []


async def _leader(nodes, timeout=10.0):
    return await until(lambda: next((n for n in nodes.values() if n.serving), None),
                       "a serving leader", timeout)


def test_the_leader_serves_and_its_successor_keeps_what_it_saved(tmp_path):
    async def go():
        peers, nodes = _group(tmp_path, free_ports(3))
        for n in nodes.values():
            await n.start()
        client = ControlNodeClient(";".join(peers.values()), "broker-a")
        raw = RemotingClient()
        try:
            leader = await _leader(nodes)
            follower = next(n for n in nodes.values() if n is not leader)
            # a follower refuses, naming the leader
            r = await raw.invoke(follower.address, RemotingCommand(
                RequestCode.CONTROL_STATUS), 2.0)
            assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
            assert r.ext["leaderAddr"] == leader.address
            # the broker's link, started on a follower's address, finds the leader
            client._at = client.addrs.index(follower.address)
            view = await client.heartbeat(dict(HEARTBEAT))
            assert (view.role, view.epoch) == ("MASTER", 1)
            assert await client.cache(1, 0, 100, "id-0", b"m" * 100)
            # every node applied it (the answer waited for the commit on a majority)
            await until(lambda: sum(len(_cache(n)) == 1 for n in nodes.values()) >= 2,
                        "the cache on a majority")
            await leader.stop()
            nodes = {k: n for k, n in nodes.items() if n is not leader}
            successor = await _leader(nodes)
            assert successor is not leader
            view = await client.heartbeat({**HEARTBEAT, "epoch": "1", "maxOffset": "100"})
            assert (view.role, view.epoch, view.slot) == ("MASTER", 1, 1)
            assert await client.resolve(1, 100, "id-0", 3.0) is Resolution.DONE
            assert client.addr == successor.address
        finally:
            await client.close()
            await raw.close()
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())


def test_a_node_back_after_compaction_restarts_from_the_snapshot(tmp_path, monkeypatch):
    import ledgermq.controlnode.replicated as replicated
    monkeypatch.setattr(replicated, "SNAPSHOT_EVERY_ENTRIES", 20)

    async def go():
        ports = free_ports(3)
        peers, nodes = _group(tmp_path, ports)
        for n in nodes.values():
            await n.start()
        client = ControlNodeClient(";".join(peers.values()), "broker-a")
        try:
            leader = await _leader(nodes)
            away = next(n for n in nodes.values() if n is not leader)
            await away.stop()
            await client.heartbeat(dict(HEARTBEAT))
            for i in range(60):  # 60 entries: compacted twice at least
                assert await client.cache(1, i * 10, i * 10 + 10, f"id-{i}", b"x" * 10)
            await until(lambda: leader.log.begin > 20, "the leader's log compacted")
            back = ReplicatedControlNode(away.self_id, peers, tmp_path / away.self_id)
            nodes[away.self_id] = back
            await back.start()
            await until(lambda: back.applied >= leader.applied and
                        len(back.saved.groups["broker-a"].cache) == 60,
                        "the node back holds the leader's state")
            assert back.log.begin > 0  # it restarted its log from the leader's snapshot
            assert back.saved.groups["broker-a"].state == leader.saved.groups["broker-a"].state
        finally:
            await client.close()
            for n in nodes.values():
                if n is not away:
                    await n.stop()
    asyncio.run(go())


def test_a_restarted_node_rebuilds_its_state_from_its_compacted_log(tmp_path, monkeypatch):
    import ledgermq.controlnode.replicated as replicated
    monkeypatch.setattr(replicated, "SNAPSHOT_EVERY_ENTRIES", 10)

    async def go():
        peers, nodes = _group(tmp_path, free_ports(1), ids=("solo",))
        node = nodes["solo"]
        await node.start()
        client = ControlNodeClient(node.address, "broker-a")
        try:
            await _leader(nodes)
            await client.heartbeat(dict(HEARTBEAT))
            for i in range(35):
                assert await client.cache(1, i * 10, i * 10 + 10, f"id-{i}", b"y" * 10)
            await until(lambda: node.log.begin > 0, "the log compacted")
            before = node.saved.groups["broker-a"]
        finally:
            await client.close()
            await node.stop()
        again = ReplicatedControlNode("solo", peers, tmp_path / "solo")
        after = again.saved.groups["broker-a"]
        assert (after.state, [c.msg_id for c in after.cache]) == \
            (before.state, [c.msg_id for c in before.cache])
        again.log.close()
        again._dir_lock.release()
    asyncio.run(go())


@pytest.mark.parametrize("text", ["", "host", "a:1;b", "a:0", "a:x"])
def test_control_node_addresses_are_checked(text):
    with pytest.raises(ValueError):
        control_node_addrs(text)


def test_a_cache_the_leaders_disk_refused_is_not_acknowledged(tmp_path):
    """The leader's log write fails (a full disk) while one follower of two is down: the
    leader does not count itself, so the cached message is not acknowledged, and it is
    nowhere once the group serves again (the leader halted, started again from its disk,
    and the group took the next cache)."""
    async def go():
        peers, nodes = _group(tmp_path, free_ports(3))
        for n in nodes.values():
            await n.start()
        client = ControlNodeClient(";".join(peers.values()), "broker-a")
        try:
            leader = await _leader(nodes)
            assert (await client.heartbeat(dict(HEARTBEAT))).role == "MASTER"
            down = next(n for n in nodes.values() if n is not leader)
            await down.stop()
            nodes = {k: n for k, n in nodes.items() if n is not down}
            full = [True]
            write = leader.log.write_entries

            def write_entries(entries):
                if full[0]:
                    raise OSError(28, "No space left on device (test)")
                return write(entries)
            leader.log.write_entries = write_entries
            assert not await client.cache(1, 0, 100, "id-0", b"m" * 100)
            full[0] = False
            assert await until(lambda: client.cache(1, 0, 100, "id-1", b"m" * 100),
                               "a cache taken", 15)
            now = await _leader(nodes)
            assert [c.msg_id for c in _cache(now)] == ["id-1"], _cache(now)
        finally:
            await client.close()
            for n in nodes.values():
                await n.stop()
    asyncio.run(go())
