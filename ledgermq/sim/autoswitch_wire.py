"""The messages of the controller-mode simulation (`autoswitch`): a broker's requests to
the controllers and their replies, and what flows on an HA link between an
AutoSwitchMaster and an AutoSwitchSlave. All small frozen dataclasses."""
from __future__ import annotations

from dataclasses import dataclass

message = dataclass(frozen=True, slots=True)


# ---- broker -> controller ---------------------------------------------------------------
@message
class Ask:
    broker: str


@message
class RegisterAsk(Ask):
    """RegisterBroker: the broker learns its broker id."""


@message
class HeartbeatAsk(Ask):
    """A registered broker's heartbeat (with what elections go by); answered with the
    group's view."""
    broker_id: int
    epoch: int = -1
    max_offset: int = -1


@message
class ElectAsk(Ask):
    """The group has no master: elect one among the brokers heard lately (the most
    up-to-date first)."""


@message
class AlterAsk(Ask):
    """A master asks to change its SyncStateSet."""
    master_id: int
    master_epoch: int
    members: tuple[int, ...]
    set_epoch: int


# ---- controller -> broker ---------------------------------------------------------------
@message
class Reply:
    pass


@message
class NotLeader(Reply):
    """Ask the next controller."""


@message
class ViewReply(Reply):
    view: dict  # the group's view: masterBrokerId, masterEpoch, syncStateSet, ...


@message
class Answered(Reply):
    """A request proposed to the controllers' Raft log was applied with `result`."""
    ask: Ask
    result: object


# ---- on an HA link -------------------------------------------------------------------
@message
class Hello:
    """Slave -> master: the handshake."""
    slave_id: int
    learner: bool
    from_last_file: bool


@message
class Ack:
    """Slave -> master: how far its log goes."""
    offset: int


@message
class Epochs:
    """Master -> slave: its epoch file and log end, to find where they part."""
    epochs: tuple[tuple[int, int], ...]
    log_end: int


@message
class Data:
    """Master -> slave: `size` bytes of log at `offset`, within an epoch."""
    offset: int
    size: int
    epoch: int
    epoch_start: int
    confirm: int
    body: bytes
