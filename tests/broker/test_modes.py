"""The broker picks one replication mode from its config, once."""
import pytest

from ledgermq.broker import load_broker_config
from ledgermq.broker.modes import (
    CheckpointMode, ClassicHAMode, ControllerMode, DLedgerMode, StandaloneMode, mode_class,
)


def config(**keys):
    return load_broker_config(None, {k: str(v) for k, v in keys.items()})[0]


@pytest.mark.parametrize("keys, standalone, expected", [
    ({}, False, ClassicHAMode),  # `ledgermq broker`: an ASYNC_MASTER slaves may follow
    ({}, True, StandaloneMode),  # `ledgermq dev`: one broker, no HA port
    ({"brokerRole": "SYNC_MASTER"}, True, ClassicHAMode),  # dev with a SYNC_MASTER conf
    ({"brokerRole": "SLAVE", "brokerId": 1}, False, ClassicHAMode),
    ({"enableDLegerCommitLog": "true", "dLegerPeers": "n0-127.0.0.1:1", "dLegerSelfId": "n0"},
     True, DLedgerMode),
    ({"enableConsistentCheckpoint": "true", "controlNodeAddr": "127.0.0.1:1"}, False,
     CheckpointMode),
    ({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:1"}, False, ControllerMode),
])
def test_mode_follows_the_config(keys, standalone, expected):
    assert mode_class(config(**keys), standalone) is expected
