"""Controller-mode brokers in one process with a controller inside the name server: the
safe acknowledgement is the default (a send waits for every SyncStateSet member), a
configuration that gives it up says so loudly at start-up, heartbeats tell the controller
each broker's epoch and log end (what it elects by), and `syncFromLastFile` makes a new
slave start at the master's last file."""
import asyncio
import contextlib
import logging

from ledgermq import Message, Producer
from ledgermq.broker import Broker, load_broker_config
from ledgermq.client.message import SendStatus
from ledgermq.localcluster.cluster import free_ports
from ledgermq.controller.client import ControllerClient
from ledgermq.namesrv import NamesrvConfig, NameServer

from ..wait import until
from .test_controller_server import controller

SEGMENT = 64 << 10


def broker(tmp_path, name: str, namesrv: str, **extra) -> Broker:
    bcfg, scfg, unknown = load_broker_config(None, {
        "namesrvAddr": namesrv, "listenPort": "0", "haListenPort": str(free_ports(1)[0]),
        "storePathRootDir": str(tmp_path / name), "mappedFileSizeCommitLog": str(SEGMENT),
        "enableControllerMode": "true", "controllerAddr": namesrv,
        "brokerHeartbeatInterval": "100", "haSendHeartbeatInterval": "100", **extra})
    assert not unknown, unknown
    return Broker(bcfg, scfg)


@contextlib.asynccontextmanager
async def name_server_with_controller(tmp_path):
    ns_port, ctl_port = free_ports(2)
    ns = NameServer(NamesrvConfig(listenPort=ns_port))
    ns.controller = controller(tmp_path, ctl_port)
    await ns.start()
    try:
        await until(lambda: ns.controller.is_leader, "the embedded controller leads")
        yield ns
    finally:
        await ns.stop()


@contextlib.asynccontextmanager
async def running(b: Broker):
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


def sync_state_set(ns) -> tuple:
    g = ns.controller.core.metadata.groups.get("broker-a")
    return () if g is None else g.sync_state_set


def test_by_default_a_send_waits_for_every_sync_state_set_member(tmp_path):
    """No acknowledgement key in broker.conf: with the slave gone (still in the set), the
    master does not acknowledge alone (RocketMQ's default would: SEND_OK)."""
    async def go():
        async with name_server_with_controller(tmp_path) as ns:
            keep = {"haMaxTimeSlaveNotCatchUp": "60000", "syncFlushTimeout": "1000"}
            async with running(broker(tmp_path, "a", ns.address, **keep)) as a:
                await until(lambda: a.mode.is_master, "a is master")
                b = broker(tmp_path, "b", ns.address, **keep)
                async with running(b):
                    await until(lambda: len(sync_state_set(ns)) == 2, "b joins the set")
                async with Producer("p", ns.address, retry_times=0) as p:
                    r = await p.send(Message("T", b"needs both"))
                    assert r.status is SendStatus.FLUSH_SLAVE_TIMEOUT, r
    asyncio.run(go())


def test_a_configuration_that_gives_the_promise_up_is_logged_loudly(tmp_path, caplog):
    async def go():
        async with name_server_with_controller(tmp_path) as ns:
            with caplog.at_level(logging.WARNING):
                async with running(broker(tmp_path, "safe", ns.address)):
                    pass
                assert "gives up" not in caplog.text
                async with running(broker(tmp_path, "unsafe", ns.address,
                                          allAckInSyncStateSet="false", inSyncReplicas="1")):
                    pass
            loud = [r for r in caplog.records if "allAckInSyncStateSet=false" in
                    r.getMessage()]
            assert loud and loud[0].levelno >= logging.WARNING, caplog.text
            text = loud[0].getMessage()
            assert "gives up the promise" in text and "inSyncReplicas=1" in text
            assert "the master alone" in text
    asyncio.run(go())


def test_sync_from_last_file_starts_a_new_slave_at_the_masters_last_file(tmp_path, caplog):
    async def go():
        async with name_server_with_controller(tmp_path) as ns:
            async with running(broker(tmp_path, "a", ns.address)) as a:
                await until(lambda: a.mode.is_master, "a is master")
                async with Producer("p", ns.address) as p:
                    for i in range(400):  # about three 64 KiB files
                        await p.send(Message("T", bytes([65 + i % 26]) * 500))
                end = a.store.commitlog.max_offset
                last_file = end - end % SEGMENT
                assert last_file >= 2 * SEGMENT
                async with running(broker(tmp_path, "b", ns.address,
                                          syncFromLastFile="true")) as b:
                    await until(lambda: b.store.commitlog.max_offset == end,
                                "the new slave caught up")
                    assert b.store.commitlog.min_offset == last_file
                    assert b.store.commitlog.read(last_file, end - last_file) == \
                        a.store.commitlog.read(last_file, end - last_file)
                async with running(broker(tmp_path, "c", ns.address)) as c:  # the default
                    await until(lambda: c.store.commitlog.max_offset == end,
                                "a default slave caught up")
                    assert c.store.commitlog.min_offset == 0
        unsafe = [r.getMessage() for r in caplog.records if "UNSAFE" in r.getMessage()]
        assert len(unsafe) == 1 and "syncFromLastFile=true" in unsafe[0]
    asyncio.run(go())


def test_heartbeats_report_epoch_and_log_end_to_the_controller(tmp_path):
    async def go():
        async with name_server_with_controller(tmp_path) as ns:
            async with running(broker(tmp_path, "a", ns.address,
                                      brokerElectionPriority="7")) as a:
                await until(lambda: a.mode.is_master, "a is master")
                async with Producer("p", ns.address) as p:
                    for i in range(5):
                        await p.send(Message("T", b"x%d" % i))
                end = a.store.commitlog.max_offset

                async def reported():
                    async with ControllerClient(ns.address) as cli:
                        g = (await cli.sync_state_set(["broker-a"]))["broker-a"]
                    return g["liveness"][str(a.mode.controller_id)]
                info = await until(_when(reported, lambda i: i["maxOffset"] == end),
                                   "the log end reaches the controller")
                assert info["epoch"] == a.mode.master_epoch == 1
                assert info["electionPriority"] == 7
    asyncio.run(go())


def _when(fetch, ok):
    async def check():
        value = await fetch()
        return value if ok(value) else None
    return check
