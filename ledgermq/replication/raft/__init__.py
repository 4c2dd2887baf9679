"""DLedger-style Raft (S0) as a pure state machine."""
from .messages import (
    AppendEntries, Code, Complete, Entry, Push, PushResponse, PushType, RaftConfig, ResetLog, Role,
    SaveCommit, SaveMeta, Send, TimeoutNow, TruncateAfter, VoteRequest, VoteResponse,
)
from .node import BUGS, RaftNode

__all__ = ["BUGS", "RaftNode", "AppendEntries", "Code", "Complete", "Entry", "Push",
           "PushResponse", "PushType", "RaftConfig", "ResetLog", "Role", "SaveCommit",
           "SaveMeta", "Send", "TimeoutNow", "TruncateAfter", "VoteRequest", "VoteResponse"]
