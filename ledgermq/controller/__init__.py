"""Controller mode (S1): the controller's metadata as a deterministic state machine whose
commands travel through the Raft log (replication/raft), so every controller node applies
the same commands in the same order."""
from .metadata import (
    BUGS, AlterSyncStateSet, BrokerGroup, CleanBrokerMetadata, ControllerMetadata, ElectMaster,
    RegisterBroker, Result, decode_command, encode_command,
)
from .node import Answer, Applied, ControllerNode

__all__ = ["BUGS", "Answer", "Applied", "ControllerNode", "AlterSyncStateSet", "BrokerGroup", "CleanBrokerMetadata", "ControllerMetadata",
           "ElectMaster", "RegisterBroker", "Result", "decode_command", "encode_command"]
