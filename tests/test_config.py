"""broker.conf-style configuration: typed values, unknown keys reported, bad values refused."""
import pytest

from ledgermq.runtime.config import ConfigError, build, read_properties
from ledgermq.store import FlushDiskType, StoreConfig


def test_properties_file_to_store_config(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# a comment\nstorePathRootDir=/data/x\nflushDiskType = SYNC_FLUSH\n"
                    "mappedFileSizeCommitLog=1048576\nmessageIndexEnable=false\n"
                    "brokerName: broker-a\n")
    cfg, unknown = build(StoreConfig, read_properties(conf))
    assert cfg.flushDiskType is FlushDiskType.SYNC_FLUSH
    assert cfg.mappedFileSizeCommitLog == 1 << 20 and cfg.messageIndexEnable is False
    assert str(cfg.commitlog_dir) == "/data/x/commitlog"
    assert unknown == ["brokerName"]
    with pytest.raises(ConfigError, match="unknown config keys: brokerName"):
        build(StoreConfig, read_properties(conf), strict=True)


@pytest.mark.parametrize("key,value,message", [
    ("flushDiskType", "SOMETIMES", "one of ASYNC_FLUSH, SYNC_FLUSH"),
    ("mappedFileSizeCommitLog", "big", "not a valid int"),
    ("mappedFileSizeCommitLog", "100", "at least 4096"),
    ("diskMaxUsedSpaceRatio", "150", "percentage"),
    ("messageIndexEnable", "yes", "not a valid bool"),
    ("syncFlushTimeout", "0", "greater than 0"),
])
def test_bad_values_name_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message) as err:
        build(StoreConfig, {key: value})
    assert key in str(err.value)


def test_unreadable_or_malformed_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        read_properties(tmp_path / "missing.conf")
    bad = tmp_path / "bad.conf"
    bad.write_text("justakey\n")
    with pytest.raises(ConfigError, match="bad.conf:1"):
        read_properties(bad)


@pytest.mark.parametrize("overrides,message", [
    ({"enableConsistentCheckpoint": "true"}, "needs controlNodeAddr"),
    ({"enableConsistentCheckpoint": "true", "controlNodeAddr": "h:1",
      "enableDLegerCommitLog": "true"}, "choose one"),
    ({"haListenPort": "70000"}, "haListenPort"),
    ({"enableControllerMode": "true"}, "needs controllerAddr"),
    ({"enableControllerMode": "true", "controllerAddr": "h:1",
      "enableDLegerCommitLog": "true"}, "cannot be combined"),
    ({"minInSyncReplicas": "0"}, "minInSyncReplicas"),
    ({"enableDLegerCommitLog": "true", "dLegerPeers": "n0-127.0.0.1:1", "dLegerSelfId": "n0",
      "preferredLeaderId": "n7"}, "preferredLeaderId"),
    ({"brokerRole": "LEADER"}, "brokerRole"),
])
def test_bad_replication_settings_are_refused_clearly(overrides, message):
    from ledgermq.broker import load_broker_config
    with pytest.raises(ConfigError, match=message):
        load_broker_config(None, overrides)


def test_control_node_answers_a_malformed_request_with_an_error(tmp_path):
    import asyncio

    from ledgermq.controlnode import ControlNode
    from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

    async def go():
        node = ControlNode(tmp_path, "127.0.0.1", 0)
        await node.start()
        client = RemotingClient()
        try:
            addr = f"127.0.0.1:{node.port}"
            r = await client.invoke(addr, RemotingCommand(RequestCode.CONTROL_CACHE,
                                                          ext={"brokerName": "g"}), 3)
            assert r.code == ResponseCode.SYSTEM_ERROR and "bad control-node request" in r.remark
            r = await client.invoke(addr, RemotingCommand(RequestCode.PULL_MESSAGE), 3)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        finally:
            await client.close()
            await node.stop()
    asyncio.run(go())


@pytest.mark.parametrize("values,message", [
    ({"controllerDLegerPeers": "n0-127.0.0.1:1", "controllerDLegerSelfId": "n9"},
     "controllerDLegerSelfId"),
    ({"controllerDLegerPeers": "n0:127.0.0.1"}, "controllerDLegerPeers"),
    ({"brokerNotActiveTimeoutMillis": "-5"}, "brokerNotActiveTimeoutMillis"),
    ({"enableElectUncleanMaster": "maybe"}, "enableElectUncleanMaster"),
])
def test_bad_controller_settings_are_refused_clearly(values, message):
    from ledgermq.controller.config import load_controller_config
    with pytest.raises(ConfigError, match=message):
        load_controller_config(None, values)
