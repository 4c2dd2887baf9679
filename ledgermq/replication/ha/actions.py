"""Wire format and the actions the classic-HA cores (S2, and S3's checkpoint on top) ask
their driver to perform.

Wire (the seed's, RocketMQ's HA port):
- slave -> master: the slave's max commit-log offset, 8 bytes big-endian, as a heartbeat
  every `haSendHeartbeatInterval` and after every write. In checkpoint mode (S3) the report
  is 24 bytes: the offset the slave has flushed (the checkpoint counts copies on disk),
  its brokerId (the master keeps the checkpoint over named slaves, so a slave must say
  who it is), and the epoch whose master it follows (its log was cut to that epoch's
  takeover offset; a master of another epoch must not take its offset as an ack).
- master -> slave: a 12-byte header (physical offset 8, body size 4) and `size` raw
  commit-log bytes; size 0 is a heartbeat. Size -1 (S3 only, no body) publishes the
  consistent checkpoint: the header's offset is the checkpoint. Size -2 (S2 only, no
  body) asks the slave for its log from the header's offset (a recovering master, see
  refill.py), followed by the master's tail digest (8 bytes): a slave whose bytes before
  that offset differ refuses; otherwise it answers with refill frames: the 8-byte value
  -2 in place of a report, then a 12-byte header (offset, size) and the bytes.
- slave -> master (S2), first on a link: the value -3, then its log end and the digest of
  the TAIL_BYTES before it: a master holding that offset with other bytes before it
  (its log forked from the slave's: it lost bytes and wrote others there) answers with
  size -3 and closes the link instead of extending a forked log; the slave then drops its
  log and copies the master's again (S2's master is the one authority once recovered).

Driver contract: execute a step's actions in order. `Append` is answered by calling the
slave core's `appended(new_max_offset)` before anything else is fed to it; `Flush` (S3)
by calling `flushed_to(offset)` once the log is durable that far (later is fine: frames may
be fed meanwhile, and their bytes share the next flush).
"""
from __future__ import annotations

import enum
import hashlib
import struct
from dataclasses import dataclass

REPORT = struct.Struct(">q")
CHECKPOINT_REPORT = struct.Struct(">qqq")  # offset, brokerId, epoch
HEADER = struct.Struct(">qi")
CHECKPOINT_FRAME = -1
REFILL_FRAME = -2  # master -> slave: send me your log from this offset
REFILL_DATA = -2  # slave -> master, in a report's place: a refill header and bytes follow
HELLO = -3  # slave -> master (S2), first thing on a link: TAIL follows
FORKED_FRAME = -3  # master -> slave (S2): your log forks from mine: drop it, copy mine
TAIL = struct.Struct(">qQ")  # a log's end and the digest of the bytes just before it
DIGEST = struct.Struct(">Q")  # after a REFILL_FRAME header: the master's tail digest
TAIL_BYTES = 256


def tail_digest(tail: bytes) -> int:
    """A log's last TAIL_BYTES before an offset, as 8 bytes: two logs that agree there
    (they end in the same messages, whose properties carry unique keys) agree before it;
    a log that forked (a master that lost bytes and wrote others there) does not."""
    return int.from_bytes(hashlib.blake2b(tail, digest_size=8).digest(), "big") if tail else 0


class SyncStatus(enum.Enum):
    OK = "OK"  # covered by the slave ack (S2) or the consistent checkpoint (S3)
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # no slave, or too far behind: answered at once
    TIMEOUT = "TIMEOUT"  # not covered within syncFlushTimeout
    NOT_ENOUGH_REPLICAS = "IN_SYNC_REPLICAS_NOT_ENOUGH"  # controller mode: set too small


@dataclass(frozen=True)
class HAConfig:
    segment_size: int
    heartbeat_ms: int = 5000  # haSendHeartbeatInterval
    housekeeping_ms: int = 20_000  # haHousekeepingInterval
    sync_timeout_ms: int = 5000  # syncFlushTimeout
    fallbehind_max: int = 256 << 20  # haSlaveFallbehindMax
    transfer_batch: int = 256 << 10  # bytes per chunk
    window: int = 8 << 20  # bytes pushed to a slave beyond what it acknowledged
    checkpoint: bool = False  # S3: OK means covered by min over member slaves
    member_timeout_ms: int = 30_000  # S3: checkpointMemberTimeout, a silent member leaves


# ---- master actions ----------------------------------------------------------------
@dataclass(frozen=True)
class Transfer:
    link: int
    offset: int
    size: int  # never crosses a segment end nor the log end


@dataclass(frozen=True)
class Heartbeat:
    link: int
    offset: int


@dataclass(frozen=True)
class PublishCheckpoint:
    link: int
    checkpoint: int


@dataclass(frozen=True)
class Close:
    link: int
    reason: str


@dataclass(frozen=True)
class Complete:
    request_id: int
    status: SyncStatus


@dataclass(frozen=True)
class SaveCheckpoint:
    checkpoint: int
    members: tuple[tuple[int, int], ...]  # (slave brokerId, acked offset)


# ---- slave actions -----------------------------------------------------------------
@dataclass(frozen=True)
class Report:
    offset: int
    hello: bool = False  # S2: the first on a link, sent with its tail digest (HELLO)


@dataclass(frozen=True)
class Append:
    offset: int
    data: bytes  # append its longest whole-message prefix, then call appended()


@dataclass(frozen=True)
class Flush:
    offset: int  # S3: make the log durable up to at least this, then call flushed_to()


@dataclass(frozen=True)
class StartAt:
    offset: int  # an empty log starts at this (segment-aligned) offset


@dataclass(frozen=True)
class Disconnect:
    reason: str


@dataclass(frozen=True)
class Connect:
    pass


@dataclass(frozen=True)
class StoreCheckpoint:
    checkpoint: int  # the master's consistent checkpoint, as propagated (S3)
