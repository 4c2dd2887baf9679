"""The controller over real sockets and files, in one process: the committed log rebuilds
its metadata after a restart; bad requests get clear errors; the controller embedded in
the name server (enableControllerInNamesrv) makes a controller-mode broker its master; too
few in-sync replicas is a clear send error, not a silent SEND_OK."""
import asyncio
import contextlib
import logging

import pytest

from ledgermq import Message, MQClientError, Producer
from ledgermq.broker import Broker, load_broker_config
from ledgermq.localcluster.cluster import free_ports
from ledgermq.controller.client import ControllerClient, ControllerError
from ledgermq.controller.config import load_controller_config
from ledgermq.controller.server import ControllerServer
from ledgermq.namesrv import NamesrvConfig, NameServer
from ledgermq.drivers.raft import FileRaftLog
from ledgermq.remoting import (
    RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode,
)
from ledgermq.replication.raft import Entry
from ledgermq.store.marks.epoch_file import EpochFile

from ..wait import until


def controller(tmp_path, port, **extra):
    return ControllerServer(load_controller_config(None, {
        "controllerDLegerPeers": f"n0-127.0.0.1:{port}", "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(tmp_path / "ctl"), "electionTimeoutMs": "50",
        "brokerNotActiveTimeoutMillis": "2000", **extra}))


REGISTER = {"clusterName": "C", "brokerName": "g", "brokerAddress": "127.0.0.1:1",
            "haAddress": "127.0.0.1:2"}


def test_metadata_survives_a_restart_and_bad_requests_get_errors(tmp_path):
    port = free_ports(1)[0]
    addr = f"127.0.0.1:{port}"

    async def go():
        c = controller(tmp_path, port)
        await c.start()
        await until(lambda: c.is_leader, "the controller leads")
        async with ControllerClient(addr) as cli:
            view = await cli.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
            assert view["brokerId"] == 1
            elected = await cli.elect_master("g")
            assert elected["masterBrokerId"] == 1 and elected["masterEpoch"] == 1
            with pytest.raises(ControllerError, match="not registered"):
                await cli.elect_master("nope")
            with pytest.raises(ControllerError, match="bad request"):
                await cli.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                               {"brokerName": "g"})
            with pytest.raises(ControllerError, match="bad request.*maxOffset|invalid literal"):
                await cli.call(RequestCode.BROKER_HEARTBEAT, {
                    "brokerName": "g", "brokerId": 1, "maxOffset": "lots"})
            with pytest.raises(ControllerError, match="stale"):  # fenced by the set epoch
                await cli.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
                    "brokerName": "g", "masterId": 1, "masterEpoch": 1,
                    "syncStateSetEpoch": 0}, body=[1])
            raw = RemotingClient()
            r = await raw.invoke(addr, RemotingCommand(RequestCode.PULL_MESSAGE), 3)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            await raw.close()
        await c.stop()
        again = controller(tmp_path, port)  # the log replays into the same metadata
        await again.start()
        await until(lambda: again.is_leader, "the restarted controller leads")
        async with ControllerClient(addr) as cli:
            g = (await cli.sync_state_set(["g"]))["g"]
            assert (g["masterBrokerId"], g["masterEpoch"], g["syncStateSet"]) == (1, 1, [1])
            assert (await cli.config())["controllerDLegerSelfId"] == "n0"
        await again.stop()
    asyncio.run(go())


def test_a_change_the_disk_refused_is_neither_acknowledged_nor_applied(tmp_path, monkeypatch):
    """A controller whose log write fails (a full disk) halts rather than apply the entry
    from memory: the broker's registration is refused, no later answer shows it, and once
    there is room the controller takes changes again; what it says is what a restart of
    it reads back."""
    port = free_ports(1)[0]
    addr = f"127.0.0.1:{port}"
    full = [False]
    write = FileRaftLog.write_entries

    def write_entries(log, entries):
        if full[0]:
            raise OSError(28, "No space left on device (test)")
        return write(log, entries)
    monkeypatch.setattr(FileRaftLog, "write_entries", write_entries)

    async def go():
        c = controller(tmp_path, port)
        await c.start()
        await until(lambda: c.is_leader, "the controller leads")
        async with ControllerClient(addr, timeout=1.0) as cli:
            full[0] = True
            with pytest.raises((ControllerError, asyncio.TimeoutError, RemotingError)):
                await cli.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
            full[0] = False
            view = await until(lambda: _register(cli), "a registration taken", 10)
            assert view["brokerId"] == 1  # the refused one left no trace
        await c.stop()
        again = controller(tmp_path, port)
        await again.start()
        await until(lambda: again.is_leader, "the restarted controller leads")
        async with ControllerClient(addr) as cli:
            assert (await cli.call(RequestCode.CONTROLLER_REGISTER_BROKER, {
                **REGISTER, "brokerAddress": "127.0.0.1:3"}))["brokerId"] == 2
        await again.stop()
    asyncio.run(go())


async def _register(cli: ControllerClient) -> dict | None:
    try:
        return await cli.call(RequestCode.CONTROLLER_REGISTER_BROKER, REGISTER)
    except (ControllerError, asyncio.TimeoutError, RemotingError):
        return None


def test_file_raft_log_drops_a_torn_record_and_rewrites_after_a_cut(tmp_path):
    log = FileRaftLog(tmp_path / "log")
    entries = [Entry(i, 1, b"x" * (i + 1)) for i in range(5)]
    log.append(entries)
    log.write_entries(entries)
    log.sync()
    log.truncate_after(2)
    log.cut_after(2)
    log.append([Entry(3, 2, b"new")])
    log.write_entries([Entry(3, 2, b"new")])
    log.sync()
    log.close()
    with open(tmp_path / "log", "ab") as f:
        f.write(b"\x00\x00\x00")  # a torn next record
    back = FileRaftLog(tmp_path / "log")
    assert [(e.index, e.term, e.data) for e in back.entries(0, 10)] == \
        [(0, 1, b"x"), (1, 1, b"xx"), (2, 1, b"xxx"), (3, 2, b"new")]
    back.close()


def broker_in_controller_mode(tmp_path, namesrv: str, **extra) -> Broker:
    bcfg, scfg, _ = load_broker_config(None, {
        "namesrvAddr": namesrv, "listenPort": "0", "haListenPort": str(free_ports(1)[0]),
        "storePathRootDir": str(tmp_path / "store"), "mappedFileSizeCommitLog": str(1 << 20),
        "enableControllerMode": "true", "controllerAddr": namesrv,
        "brokerHeartbeatInterval": "100", **extra})
    return Broker(bcfg, scfg)


@contextlib.asynccontextmanager
async def name_server_with_controller_and_broker(tmp_path, **broker_settings):
    """A name server with an embedded controller, and a controller-mode broker that uses
    the name server's address as its controllerAddr; yields once the broker is master."""
    ns_port, ctl_port = free_ports(2)
    ns = NameServer(NamesrvConfig(listenPort=ns_port))
    ns.controller = controller(tmp_path, ctl_port)
    await ns.start()
    try:
        await until(lambda: ns.controller.is_leader, "the embedded controller leads")
        b = broker_in_controller_mode(tmp_path, ns.address, **broker_settings)
        await b.start()
        try:
            await until(lambda: b.mode.is_master, "the broker is master")
            yield ns, b
        finally:
            await b.stop()
    finally:
        await ns.stop()


def test_controller_in_the_name_server_elects_a_broker(tmp_path):
    async def go():
        async with name_server_with_controller_and_broker(tmp_path) as (ns, b):
            async with Producer("p", ns.address) as p:
                r = await p.send(Message("T", b"hello"))
                assert r.status.value == "SEND_OK"
            async with ControllerClient(ns.address) as cli:  # through the name server's port
                g = (await cli.sync_state_set())["broker-a"]
                assert g["masterAddress"] == b.address and g["syncStateSet"] == [1]
    asyncio.run(go())


def test_too_few_in_sync_replicas_is_a_clear_send_error(tmp_path):
    async def go():
        async with name_server_with_controller_and_broker(tmp_path, minInSyncReplicas="2") \
                as (ns, _):
            async with Producer("p", ns.address, retry_times=0) as p:
                with pytest.raises(MQClientError, match="IN_SYNC_REPLICAS_NOT_ENOUGH"):
                    await p.send(Message("T", b"hello"))
    asyncio.run(go())


def test_the_most_up_to_date_member_is_elected(tmp_path):
    """Brokers report epoch, max offset and election priority in their heartbeats; the
    controller elects by highest epoch, then highest max offset, then lowest priority
    value (RocketMQ's order), whether a broker asks or the master's heartbeats stop."""
    port = free_ports(1)[0]
    reports = {1: (3, 400, 2**31 - 1), 2: (3, 900, 5), 3: (3, 900, 1), 4: (2, 5000, 0)}
    beating = set(reports)

    async def heartbeats(cli):
        while True:
            for b in sorted(beating):
                epoch, offset, priority = reports[b]
                await cli.call(RequestCode.BROKER_HEARTBEAT, {
                    "brokerName": "g", "brokerId": b, "epoch": epoch, "maxOffset": offset,
                    "confirmOffset": offset, "electionPriority": priority})
            await asyncio.sleep(0.1)  # a heartbeat interval, not a wait for anything

    async def go():
        c = controller(tmp_path, port)
        await c.start()
        await until(lambda: c.is_leader, "the controller leads")
        async with ControllerClient(f"127.0.0.1:{port}") as cli:
            for b in reports:
                await cli.call(RequestCode.CONTROLLER_REGISTER_BROKER,
                               {**REGISTER, "brokerAddress": f"127.0.0.1:{b}"})
            beat = asyncio.create_task(heartbeats(cli))
            try:
                await until(lambda: len(c.core.reports) == 4, "every broker reported")
                # a broker asks (the group has no master): epoch 3 beats 4's longer log of
                # epoch 2; 2 and 3 hold as much, and 3's priority value is lower
                view = await cli.call(RequestCode.CONTROLLER_ELECT_MASTER, {"brokerName": "g"})
                assert view["masterBrokerId"] == 3
                await cli.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
                    "brokerName": "g", "masterId": 3, "masterEpoch": view["masterEpoch"],
                    "syncStateSetEpoch": view["syncStateSetEpoch"]}, body=[1, 2, 3, 4])
                # the master goes silent; all in epoch 4 now, 4 holds the most
                reports.update({1: (4, 1200, 0), 2: (4, 1100, 0), 4: (4, 1300, 9)})
                beating.discard(3)
                g = await until(lambda: (v := c.core.metadata.groups["g"]).master != 3 and v,
                                "a new master after the heartbeat timeout")
                assert g.master == 4 and g.master_epoch == view["masterEpoch"] + 1
                data = (await cli.sync_state_set(["g"]))["g"]
                assert data["liveness"]["4"] == {"epoch": 4, "maxOffset": 1300,
                                                 "confirmOffset": 1300, "electionPriority": 9}
            finally:
                beat.cancel()
                await asyncio.gather(beat, return_exceptions=True)
        await c.stop()
    asyncio.run(go())


def test_unclean_elections_are_logged_loudly_at_start_up(tmp_path, caplog):
    async def go():
        with caplog.at_level(logging.WARNING):
            for unclean in ("false", "true"):
                c = controller(tmp_path, free_ports(1)[0], enableElectUncleanMaster=unclean)
                await c.start()
                await c.stop()
    asyncio.run(go())
    loud = [r for r in caplog.records if "UNSAFE" in r.getMessage()]
    assert len(loud) == 1 and "enableElectUncleanMaster=true" in loud[0].getMessage()


def test_a_restarted_broker_keeps_the_epochs_its_log_holds(tmp_path):
    """Issue #28: the epoch file was trimmed to the log's end before the store was
    recovered (an end of 0), so a restarted broker forgot every epoch but the first. Its
    next master then saw two histories that part where epoch 2 begins, and the broker cut
    away everything it had copied since, bytes both replicas held alike."""
    async def go():
        async with name_server_with_controller_and_broker(tmp_path) as (ns, b):
            async with Producer("p", ns.address) as p:
                for i in range(5):
                    assert (await p.send(Message("T", b"x%d" % i))).status.value == "SEND_OK"
            middle = b.store.commitlog.max_offset
            async with Producer("p", ns.address) as p:
                for i in range(5):
                    assert (await p.send(Message("T", b"y%d" % i))).status.value == "SEND_OK"
            end = b.store.commitlog.max_offset
        # as if it had copied the second half from another master's term, epoch 7
        EpochFile(tmp_path / "store" / "epochFile").append(7, middle)
        closed = free_ports(1)[0]  # no controller: the broker only opens its files
        again = broker_in_controller_mode(tmp_path, f"127.0.0.1:{closed}")
        await again.start()
        try:
            assert again.store.commitlog.max_offset == end
            assert again.mode.epochs.entries == [(1, 0), (7, middle)]
        finally:
            await again.stop()
        assert EpochFile(tmp_path / "store" / "epochFile").entries == [(1, 0), (7, middle)]
    asyncio.run(go())


def test_a_slave_keeps_a_consumers_offset_past_its_queue(tmp_path):
    """Issue #28: a consumer read to offset N on the master; the master died, and the slave
    it then pulled from had dispatched a little less (its confirm offset arrives with the
    next push). It answered OFFSET_MOVED to the queue's start, and the consumer read the
    whole queue again. As RocketMQ's slave (offsetCheckInSlave=false), a broker that is not
    the master answers PULL_RETRY_IMMEDIATELY and keeps the consumer's offset."""
    async def go():
        async with name_server_with_controller_and_broker(tmp_path) as (ns, b):
            async with Producer("p", ns.address) as p:
                for i in range(5):
                    assert (await p.send(Message("T", b"x%d" % i))).status.value == "SEND_OK"
            qid = next(q for (t, q), cq in b.store.queues.items() if t == "T" and cq.max_offset)
        closed = free_ports(1)[0]
        again = broker_in_controller_mode(tmp_path, f"127.0.0.1:{closed}")
        await again.start()  # no controller: no role, so not the master
        try:
            assert again.mode.is_slave
            cli = RemotingClient()
            try:
                r = await cli.invoke(again.address, RemotingCommand(
                    RequestCode.PULL_MESSAGE, ext={
                        "consumerGroup": "g", "topic": "T", "queueId": str(qid),
                        "queueOffset": "40", "maxMsgNums": "32", "sysFlag": "0",
                        "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": "*", "subVersion": "0"}), 5)
            finally:
                await cli.close()
            assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY, (r.code, r.remark)
            assert r.ext["nextBeginOffset"] == "40"
        finally:
            await again.stop()
    asyncio.run(go())
