"""DLedger-style Raft (S0) as a pure state machine."""
from .node import BUGS, RaftNode
from .messages import (
    AppendEntries, Code, Complete, Entry, Push, PushResponse, PushType, RaftConfig, ResetLog, Role,
    SaveCommit, SaveMeta, Send, TimeoutNow, TruncateAfter, VoteRequest, VoteResponse,
)

__all__ = ["BUGS", "RaftNode", "AppendEntries", "Code", "Complete", "Entry", "Push",
           "PushResponse", "PushType", "RaftConfig", "ResetLog", "Role", "SaveCommit",
           "SaveMeta", "Send", "TimeoutNow", "TruncateAfter", "VoteRequest", "VoteResponse"]
