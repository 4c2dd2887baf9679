"""POP consumption, what RocketMQ 5's SimpleConsumer and PushConsumer stand on: a consumer
does not own queues; it receives messages for an invisible duration and acks each. One
not acked in time is delivered again: through the group's retry topic with one more
delivery attempt (RocketMQ's revive), or, for a FIFO group, in place, the queue holding
back everything after it until it is acked (and handing out again, in order, what was
acked after it).

The state of one (group, topic, queue), kept by the queue's master:
    committed   every offset below it is done; it is the group's consumer offset, saved
                and copied to followers like any other, so a new master starts there
    cursor      the next offset to hand out (committed <= cursor)
    inflight    offset -> the delivery out now (its deadline, its stamp, its attempt)
    done        acked (or revived, or filtered out) offsets in [committed, cursor)
A delivery's stamp names it: an ack or an invisibility change naming an older delivery of
the same offset (it has been redelivered since) is refused as stale.
Pure bookkeeping: no store, no clock (callers pass `now_ms`)."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

HANDLE_VERSION = "L1"
Key = tuple[str, str, int]  # (group, topic, queue id)


class Handle(NamedTuple):
    """What a receipt handle names: one delivery of one message. (A NamedTuple: made for
    every message a pop hands out and every ack, at a fifth of a frozen dataclass's cost.)"""
    broker: str
    topic: str   # the queue's topic: the retry topic for a redelivered message
    queue_id: int
    offset: int
    stamp: int   # the delivery's pop time (ms), unique per offset
    invisible_ms: int

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.stamp + self.invisible_ms

    def encode(self) -> str:
        return " ".join((HANDLE_VERSION, self.broker, self.topic, str(self.queue_id),
                         str(self.offset), str(self.stamp), str(self.invisible_ms)))

    @classmethod
    def decode(cls, text: str) -> "Handle":
        """ValueError for anything this broker did not hand out."""
        parts = text.split(" ")
        if len(parts) != 7 or parts[0] != HANDLE_VERSION:
            raise ValueError(f"receipt handle {text[:80]!r} was not issued by ledgermq")
        try:
            return cls(parts[1], parts[2], *map(int, parts[3:]))
        except ValueError:
            raise ValueError(f"receipt handle {text[:80]!r} is malformed") from None


@dataclass
class Inflight:
    deadline: int
    stamp: int
    attempt: int


@dataclass
class PopQueue:
    committed: int
    cursor: int = -1
    inflight: dict[int, Inflight] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    attempts: dict[int, int] = field(default_factory=dict)  # FIFO: deliveries so far

    def __post_init__(self) -> None:
        if self.cursor < self.committed:
            self.cursor = self.committed

    def blocked(self) -> bool:
        """A FIFO queue hands out nothing while a delivery is out."""
        return bool(self.inflight)

    def hand_out(self, offsets: list[int], next_offset: int, now_ms: int, invisible_ms: int,
                 stamp: int) -> list[tuple[int, int]]:
        """`offsets` read from the cursor on (the rest up to `next_offset` were filtered
        out): each goes out with `stamp`; (offset, attempt) for each."""
        out = []
        for off in offsets:
            attempt = self.attempts.get(off, 0) + 1
            self.attempts[off] = attempt
            self.inflight[off] = Inflight(now_ms + invisible_ms, stamp, attempt)
            out.append((off, attempt))
        taken = set(offsets)
        for off in range(self.cursor, next_offset):
            if off not in taken:
                self.done.add(off)
        self.cursor = max(self.cursor, next_offset)
        self._advance()
        return out

    def ack(self, offset: int, stamp: int, expired: bool) -> bool:
        """False when this delivery is no longer the one out: redelivered since, or
        `expired` (its invisible time is over) and revived already."""
        d = self.inflight.get(offset)
        if d is None:
            return not expired and (offset < self.committed or offset in self.done)
        if d.stamp != stamp:
            return False
        del self.inflight[offset]
        self.done.add(offset)  # (its attempts kept until committed: a FIFO rewind counts on)
        self._advance()
        return True

    def acked_before(self, offsets: Iterable[int]) -> None:
        """Acks logged by an earlier master: done, not delivered again."""
        self.done.update(o for o in offsets if o >= self.committed)
        self._advance()

    def renew(self, offset: int, stamp: int, deadline: int) -> bool:
        """Keep the delivery `stamp` out until `deadline`, under the same handle; False
        once it is no longer the one out."""
        d = self.inflight.get(offset)
        if d is None or d.stamp != stamp:
            return False
        d.deadline = max(d.deadline, deadline)
        return True

    def change_invisible(self, offset: int, stamp: int, deadline: int, new_stamp: int) -> bool:
        d = self.inflight.get(offset)
        if d is None or d.stamp != stamp:
            return False
        d.deadline, d.stamp = deadline, new_stamp
        return True

    def expired(self, now_ms: int) -> list[tuple[int, Inflight]]:
        return [(off, d) for off, d in self.inflight.items() if d.deadline <= now_ms]

    def revived(self, offset: int) -> None:
        """Handed to the retry topic (or the dead-letter queue): done here."""
        self.inflight.pop(offset, None)
        self.attempts.pop(offset, None)
        self.done.add(offset)
        self._advance()

    def rewind(self, offset: int) -> None:
        """FIFO: deliver `offset` and all after it again, in order, those acked since too
        (as RocketMQ: the consumer sees its group's order again from the first message it
        did not ack)."""
        for off in [o for o in self.inflight if o >= offset]:
            del self.inflight[off]
        self.done = {o for o in self.done if o < offset}
        self.cursor = min(self.cursor, offset)

    def _advance(self) -> None:
        while self.committed in self.done:
            self.done.discard(self.committed)
            self.attempts.pop(self.committed, None)
            self.committed += 1
        if self.committed > self.cursor:
            self.cursor = self.committed


class Deadlines:
    """The next deliveries to expire, across queues: a heap whose stale entries (acked,
    or extended since) are skipped when they come up."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, Key, int, int]] = []

    def add(self, deadline: int, key: Key, offsets: Iterable[int], stamp: int) -> None:
        """Deliveries `offsets` of `key` (one pop's messages of a queue) due at `deadline`."""
        heap, push = self._heap, heapq.heappush
        for offset in offsets:
            push(heap, (deadline, key, offset, stamp))

    def __len__(self) -> int:
        return len(self._heap)

    def compact(self, live: Callable[[Key, int, int], bool]) -> None:
        """Drop the entries that are no longer `live(key, offset, stamp)`: a client that
        extends or acks deliveries faster than they come due must not grow the heap."""
        self._heap = [e for e in self._heap if live(e[1], e[2], e[3])]
        heapq.heapify(self._heap)

    def due(self, now_ms: int) -> list[tuple[Key, int, int]]:
        out = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, key, offset, stamp = heapq.heappop(self._heap)
            out.append((key, offset, stamp))
        return out
