"""Classic master/slave HA (S2) and the master's consistent checkpoint (S3), sans-IO."""
from .actions import (
    CHECKPOINT_FRAME, DIGEST, FORKED_FRAME, HEADER, HELLO, REFILL_DATA, REFILL_FRAME, REPORT, TAIL,
    TAIL_BYTES, tail_digest, CHECKPOINT_REPORT, Append, Close, Complete, Connect, Disconnect, Flush,
    HAConfig, Heartbeat, PublishCheckpoint, Report, SaveCheckpoint, StartAt, StoreCheckpoint,
    SyncStatus, Transfer,
)
from .master import BUGS, HAMaster
from .refill import AskRefill, Recovered, RefillAppend, SendLog
from .slave import BUGS as SLAVE_BUGS
from .slave import HASlave

__all__ = ["BUGS", "SLAVE_BUGS", "HAMaster", "HASlave", "AskRefill", "Recovered",
           "RefillAppend", "SendLog", "CHECKPOINT_FRAME", "CHECKPOINT_REPORT", "DIGEST", "FORKED_FRAME",
           "HEADER", "HELLO", "REFILL_DATA", "REFILL_FRAME", "REPORT", "TAIL", "TAIL_BYTES",
           "tail_digest", "Append", "Close", "Complete", "Connect", "Disconnect", "Flush",
           "HAConfig", "Heartbeat", "PublishCheckpoint", "Report", "SaveCheckpoint",
           "StartAt", "StoreCheckpoint", "SyncStatus", "Transfer"]
