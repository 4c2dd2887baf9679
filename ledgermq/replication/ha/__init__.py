"""Classic master/slave HA (S2) and the master's consistent checkpoint (S3), sans-IO."""
from .master import BUGS, HAMaster
from .slave import BUGS as SLAVE_BUGS
from .refill import AskRefill, Recovered, RefillAppend, SendLog
from .slave import HASlave
from .types import (
    CHECKPOINT_FRAME, HEADER, REFILL_DATA, REFILL_FRAME, REPORT, CHECKPOINT_REPORT, Append, Close, Complete, Connect,
    Disconnect, Flush, HAConfig, Heartbeat, PublishCheckpoint, Report, SaveCheckpoint,
    StartAt, StoreCheckpoint, SyncStatus, Transfer,
)

__all__ = ["BUGS", "SLAVE_BUGS", "HAMaster", "HASlave", "CHECKPOINT_FRAME", "HEADER",
           "REFILL_DATA", "REFILL_FRAME", "AskRefill", "Recovered", "RefillAppend", "SendLog",
           "REPORT", "CHECKPOINT_REPORT", "Append", "Close", "Complete", "Connect", "Disconnect",
           "Flush", "HAConfig", "Heartbeat", "PublishCheckpoint", "Report", "SaveCheckpoint",
           "StartAt", "StoreCheckpoint", "SyncStatus", "Transfer"]
