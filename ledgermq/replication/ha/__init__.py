"""Classic master/slave HA (S2) and the master's consistent checkpoint (S3), sans-IO."""
from .master import BUGS, HAMaster
from .slave import BUGS as SLAVE_BUGS
from .slave import HASlave
from .types import (
    CHECKPOINT_FRAME, HEADER, REPORT, CHECKPOINT_REPORT, Append, Close, Complete, Connect,
    Disconnect, Flush, HAConfig, Heartbeat, PublishCheckpoint, Report, SaveCheckpoint,
    StartAt, StoreCheckpoint, SyncStatus, Transfer,
)

__all__ = ["BUGS", "SLAVE_BUGS", "HAMaster", "HASlave", "CHECKPOINT_FRAME", "HEADER",
           "REPORT", "CHECKPOINT_REPORT", "Append", "Close", "Complete", "Connect", "Disconnect",
           "Flush", "HAConfig", "Heartbeat", "PublishCheckpoint", "Report", "SaveCheckpoint",
           "StartAt", "StoreCheckpoint", "SyncStatus", "Transfer"]
