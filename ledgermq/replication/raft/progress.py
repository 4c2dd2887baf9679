"""What the leader knows of one follower's log, and what it has sent it (etcd's
tracker/progress.go; DLedger's EntryDispatcher state).

A dispatcher is in one of three states, walked COMPARE -> TRUNCATE -> APPEND (S0-2..S0-5):
COMPARE looks for the last entry both logs share (`compare_index`), TRUNCATE makes that
entry the follower's last, APPEND streams entries from `write_index` in pipelined pushes.
Every change of state forgets the pushes in flight, so an answer to an older state is
never taken for an answer to the new one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .messages import PushType


@dataclass
class Dispatcher:
    """The leader's replication state for one peer."""

    state: PushType = PushType.COMPARE
    compare_index: int = -1
    write_index: int = 0
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # first -> (last, sent)
    inflight_control: int = -1  # send time of an unanswered COMPARE/TRUNCATE, -1 if none
    reset: bool = False  # the TRUNCATE is at our begin, no match found: the peer resets
    last_push_ms: int = -10**9
    last_leak_check_ms: int = 0
    quota_second: int = -1  # the second the quota counts bytes for
    quota_used: int = 0

    def set_state(self, state: PushType, index: int, reset: bool = False) -> None:
        """Enter `state` at `index`: the entry to compare or truncate at, or (APPEND) the
        last entry the peer is known to share, so writing resumes after it."""
        self.state = state
        self.reset = reset
        self.inflight_control = -1
        self.pending.clear()
        if state is PushType.APPEND:
            self.write_index = index + 1
        else:
            self.compare_index = index

    def compare_at(self, index: int) -> None:
        """Stay in COMPARE and ask again, at `index`."""
        self.compare_index = index
        self.inflight_control = -1

    def forget_acked(self, acked_end: int, now: int) -> None:
        """The leak check: drop pushes the peer's watermark already covers (their answers
        were lost, or overtaken by a later push's)."""
        for first in [f for f, (last, _) in self.pending.items() if last <= acked_end]:
            del self.pending[first]
        self.last_leak_check_ms = now

    def take_quota(self, now: int, size: int, quota: int) -> bool:
        """Count `size` bytes against this second's quota; False, counting nothing, when
        they would exceed it. A second's first push always goes, however large."""
        second = now // 1000
        if second != self.quota_second:
            self.quota_second, self.quota_used = second, 0
        if self.quota_used + size > quota and self.quota_used > 0:
            return False
        self.quota_used += size
        return True
