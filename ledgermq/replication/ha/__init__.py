"""Classic master/slave HA (S2) and the master's consistent checkpoint (S3), sans-IO."""
from .master import BUGS, HAMaster
from .slave import HASlave
from .types import (
    CHECKPOINT_FRAME, HEADER, REPORT, REPORT_WITH_ID, Append, Close, Complete, Connect,
    Disconnect, HAConfig, Heartbeat, PublishCheckpoint, Report, SaveCheckpoint, StartAt,
    StoreCheckpoint, SyncStatus, Transfer,
)

__all__ = ["BUGS", "HAMaster", "HASlave", "CHECKPOINT_FRAME", "HEADER", "REPORT",
           "REPORT_WITH_ID", "Append", "Close", "Complete", "Connect", "Disconnect",
           "HAConfig", "Heartbeat", "PublishCheckpoint", "Report", "SaveCheckpoint", "StartAt",
           "StoreCheckpoint", "SyncStatus", "Transfer"]
