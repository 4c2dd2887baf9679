"""One ReplicationMode per design; the broker picks one from its config, once.

    standalone   one broker (`ledgermq dev`)
    classic-ha   S2: SYNC_MASTER / ASYNC_MASTER / SLAVE over the HA port
    checkpoint   S3: the consistent checkpoint with a control node
    dledger      S0: the commit log is a Raft log
    controller   S1: roles and SyncStateSets from the controller
"""
from __future__ import annotations

from typing import Callable

from ..config import BrokerConfig, BrokerRole
from .base import Later, ModeHost, Pending, StandaloneMode, not_in_mode
from .checkpoint import CheckpointMode
from .classic_ha import ClassicHAMode
from .controller import ControllerMode
from .dledger import DLedgerMode
from .protocol import ReplicationMode

MODES: tuple[type[ReplicationMode], ...] = (
    StandaloneMode, ClassicHAMode, CheckpointMode, DLedgerMode, ControllerMode)


def mode_class(config: BrokerConfig, standalone: bool = False
               ) -> Callable[[ModeHost], ReplicationMode]:
    if config.enableDLegerCommitLog:
        return DLedgerMode
    if config.enableConsistentCheckpoint:
        return CheckpointMode
    if config.enableControllerMode:
        return ControllerMode
    if standalone and config.brokerRole is BrokerRole.ASYNC_MASTER:
        return StandaloneMode
    return ClassicHAMode


__all__ = ["CheckpointMode", "ClassicHAMode", "ControllerMode", "DLedgerMode", "Later",
           "MODES", "ModeHost", "Pending", "ReplicationMode", "StandaloneMode", "mode_class",
           "not_in_mode"]
