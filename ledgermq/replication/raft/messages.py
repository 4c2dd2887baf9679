"""Messages, log entries and the actions a Raft core asks its driver to perform.

The driver contract (as etcd's Ready): execute a step's actions in order; every persist
action (SaveMeta, AppendEntries, TruncateAfter, ResetLog, SaveCommit) must be durable
before any Send that follows it in the same list. That is how "term and vote are durable
before a vote is answered" and "a follower acks only what it has persisted" hold.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"


class PushType(enum.Enum):
    APPEND = "APPEND"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    COMMIT = "COMMIT"


class Code(enum.Enum):
    SUCCESS = "SUCCESS"
    INCONSISTENT_STATE = "INCONSISTENT_STATE"
    REPEATED_PUSH = "REPEATED_PUSH"
    EXPIRED_TERM = "EXPIRED_TERM"  # the sender's term is behind ours
    TERM_CHANGED = "TERM_CHANGED"  # a client append lost its leader before commit
    WAIT_QUORUM_ACK_TIMEOUT = "WAIT_QUORUM_ACK_TIMEOUT"
    NOT_LEADER = "NOT_LEADER"


@dataclass(frozen=True)
class Entry:
    index: int
    term: int
    data: bytes


# ---- messages ----------------------------------------------------------------------
@dataclass(frozen=True)
class VoteRequest:
    src: str
    dst: str
    term: int
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False  # leadership transfer: vote even if a leader was heard lately


@dataclass(frozen=True)
class VoteResponse:
    src: str
    dst: str
    term: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True)
class Push:
    """Leader to follower: APPEND (a batch of entries from `index`), COMPARE or TRUNCATE
    (one entry at `index`), or COMMIT (nothing but the committed index)."""

    src: str
    dst: str
    term: int
    kind: PushType
    index: int
    entries: tuple[Entry, ...]
    commit: int
    # APPEND: term of the leader's entry at index - 1 (-1: none). TRUNCATE: RESET_LOG when
    # nothing shows the follower's entries before `index` are the leader's
    prev_term: int = -1


RESET_LOG = -2  # a TRUNCATE's prev_term: restart your log with this entry alone


@dataclass(frozen=True)
class PushResponse:
    src: str
    dst: str
    term: int
    kind: PushType
    index: int  # the push's first index
    last: int  # the push's last index (index for COMPARE/TRUNCATE)
    code: Code
    begin: int  # the follower's log range, for COMPARE walking
    end: int


@dataclass(frozen=True)
class TimeoutNow:
    """Leadership transfer: the receiver starts an election at once."""

    src: str
    dst: str
    term: int


Message = VoteRequest | VoteResponse | Push | PushResponse | TimeoutNow


# ---- actions -----------------------------------------------------------------------
@dataclass(frozen=True)
class SaveMeta:
    term: int
    voted_for: str | None


@dataclass(frozen=True)
class AppendEntries:
    entries: tuple[Entry, ...]  # contiguous, starting at the log's end + 1


@dataclass(frozen=True)
class TruncateAfter:
    index: int  # delete every entry above index


@dataclass(frozen=True)
class ResetLog:
    entry: Entry  # the log becomes exactly [entry] (the leader's log starts later)


@dataclass(frozen=True)
class SaveCommit:
    index: int


@dataclass(frozen=True)
class Send:
    msg: Message


@dataclass(frozen=True)
class Complete:
    request_id: int
    code: Code
    index: int = -1
    term: int = -1


Action = SaveMeta | AppendEntries | TruncateAfter | ResetLog | SaveCommit | Send | Complete

PERSIST_ACTIONS = (SaveMeta, AppendEntries, TruncateAfter, ResetLog, SaveCommit)


@dataclass
class RaftConfig:
    """Timing and flow knobs (DLedger's names where it has them)."""

    election_timeout_ms: int = 1000  # randomized in [t, 2t)
    heartbeat_ms: int = 200
    max_pending_size: int = 1000  # in-flight pushes per peer
    max_push_timeout_ms: int = 1000  # re-push an unacked push after this
    max_batch_entries: int = 64  # entries per APPEND push
    max_push_bytes: int = 4 * 1024 * 1024  # entry bytes per APPEND push (one at least)
    quorum_ack_timeout_ms: int = 3000  # client append -> WAIT_QUORUM_ACK_TIMEOUT
    check_leak_interval_ms: int = 1000
    peer_push_quota: int = 20 * 1024 * 1024  # bytes/s to a peer behind the throttle point
    peer_push_throttle_point: int = 300 * 1024 * 1024  # bytes behind
    bugs: frozenset[str] = field(default_factory=frozenset)  # test-only: known bugs on
