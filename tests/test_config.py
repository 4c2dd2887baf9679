"""broker.conf-style configuration: typed values, unknown keys reported, bad values refused."""
import pytest

from ledgermq.config import ConfigError, build, read_properties
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
