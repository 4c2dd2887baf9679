"""Timer messages, as RocketMQ 5 has them: a message with `TIMER_DELIVER_MS` (an absolute
time), `TIMER_DELAY_SEC` or `TIMER_DELAY_MS` due later waits in the timer topic
(rmq_sys_wheel_timer, queue 0) with its delivery time in `TIMER_OUT_MS`, and is written to
its real topic and queue once due, by the writable master only.

Pending timers live in memory in two shapes: those due within the next few seconds in
10 ms slots (a dict of lists, a heap of slot numbers), the rest in two numpy int64 arrays
(delivery time, timer-topic queue offset): 16 bytes a timer. Every couple of seconds the
soon-due part of the arrays moves into the slots, in one vectorised pass.

Exactly once, across restarts and failovers: the timer topic is in the replicated commit
log, and a master (re)builds its pending timers from it, starting at a saved low mark (the
internal group CID_SYS_RMQ_TIMER's offset: below it every timer was delivered; saving it
late only means re-reading more). A delivered message keeps the timer message's UNIQ_KEY,
and a due timer whose key is already in its real topic's index (delivered before a crash or
by the previous master, and replicated) is not delivered again; one delivered but not
replicated when its master died is not in the new master's log, which delivers it once.
Without the key index (messageIndexEnable=false) it is at least once.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from typing import TYPE_CHECKING, Callable

import numpy as np

from ...store import StoreError
from ...wire.message import (
    PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY, MessageFormatError,
    decode_message, encode_properties,
)
from ..access.system_topics import TIMER_TOPIC
from .parked import BadParked, parked_destination
from .rounds import run_rounds

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

TIMER_GROUP = "CID_SYS_RMQ_TIMER"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
SLOT_MS = 10
NEAR_MS = 2000  # timers due within this long sit in slots
TICK_S = 0.005
IDLE_S = 1.0  # the longest an idle timer service rests between looks
INACTIVE_S = 0.1  # how often a slave's (or follower's) timer service looks for mastership
TICK_MAX = 500  # deliveries per tick: a backlog (after a failover) must not stall the loop
CHUNK = 4096  # pending counts per this many queue offsets give the low mark
LOAD_BATCH = 1024


def deliver_time(props: dict[str, str], now_ms: int) -> int | None:
    """When a message asks to be delivered (ms), from RocketMQ 5's timer properties; None
    when it has none. ValueError for a value that is not a whole number."""
    for key, scale, rel in ((PROPERTY_TIMER_DELIVER_MS, 1, False),
                            (PROPERTY_TIMER_DELAY_SEC, 1000, True),
                            (PROPERTY_TIMER_DELAY_MS, 1, True)):
        raw = props.get(key)
        if raw is not None:
            try:
                v = int(raw)
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not a whole number") from None
            return now_ms + v * scale if rel else v
    return None


def to_timer(props: dict[str, str], topic: str, queue_id: int, at_ms: int) -> bytes:
    """Properties of a message parked in the timer topic until `at_ms`."""
    out = {**props, PROPERTY_REAL_TOPIC: topic, PROPERTY_REAL_QUEUE_ID: str(queue_id),
           PROPERTY_TIMER_OUT_MS: str(at_ms)}
    out.setdefault(PROPERTY_UNIQ_KEY, uuid.uuid4().hex.upper())  # delivered once by it
    return encode_properties(out)


class TimerWheel:
    """Pending timers: add (time, queue offset), take the due ones; no I/O."""

    def __init__(self) -> None:
        self.far_ms = np.empty(1024, np.int64)
        self.far_off = np.empty(1024, np.int64)
        self.far_n = 0
        self.near: dict[int, list[int]] = {}
        self.slots: list[int] = []  # heap of the slots in `near`
        self.near_until = 0  # timers due before this are in `near`
        self.counts: dict[int, int] = {}  # queue offset // CHUNK -> pending

    def __len__(self) -> int:
        return self.far_n + sum(len(v) for v in self.near.values())

    def nbytes(self) -> int:
        """Bytes the arrays hold (their capacity), for the benchmark."""
        return self.far_ms.nbytes + self.far_off.nbytes

    def add(self, at_ms: int, queue_offset: int) -> None:
        chunk = queue_offset // CHUNK
        self.counts[chunk] = self.counts.get(chunk, 0) + 1
        if at_ms < self.near_until:
            self._slot(at_ms, queue_offset)
            return
        if self.far_n == len(self.far_ms):
            self.far_ms = np.resize(self.far_ms, 2 * self.far_n)
            self.far_off = np.resize(self.far_off, 2 * self.far_n)
        self.far_ms[self.far_n] = at_ms
        self.far_off[self.far_n] = queue_offset
        self.far_n += 1

    def _slot(self, at_ms: int, queue_offset: int) -> None:
        s = -(-at_ms // SLOT_MS)  # rounded up: a timer is never due early
        bucket = self.near.get(s)
        if bucket is None:
            bucket = self.near[s] = []
            heapq.heappush(self.slots, s)
        bucket.append(queue_offset)

    def due(self, now_ms: int, limit: int = 1 << 62) -> list[int]:
        """Queue offsets of the timers due by `now_ms`, at most `limit` (taken out of the
        wheel; the rest stay for the next call)."""
        if now_ms + NEAR_MS // 2 >= self.near_until:
            self._advance(now_ms + NEAR_MS)
        out: list[int] = []
        last = now_ms // SLOT_MS
        while self.slots and self.slots[0] <= last and len(out) < limit:
            bucket = self.near[self.slots[0]]
            take = limit - len(out)
            out += bucket[:take]
            del bucket[:take]
            if not bucket:
                del self.near[heapq.heappop(self.slots)]
        return out

    def _advance(self, until: int) -> None:
        n = self.far_n
        soon = self.far_ms[:n] < until
        for at, off in zip(self.far_ms[:n][soon].tolist(), self.far_off[:n][soon].tolist()):
            self._slot(at, off)
        keep = ~soon
        k = int(keep.sum())
        self.far_ms[:k] = self.far_ms[:n][keep]
        self.far_off[:k] = self.far_off[:n][keep]
        self.far_n = k
        self.near_until = until

    def next_due_ms(self) -> int | None:
        """When due() next has a timer to give or to move into the slots; None: empty."""
        at = self.slots[0] * SLOT_MS if self.slots else None
        if self.far_n:
            move = self.near_until - NEAR_MS // 2  # (due() advances from then on)
            at = move if at is None else min(at, move)
        return at

    def done(self, queue_offset: int) -> None:
        chunk = queue_offset // CHUNK
        left = self.counts[chunk] - 1
        if left:
            self.counts[chunk] = left
        else:
            del self.counts[chunk]

    def low_mark(self, loaded_to: int) -> int:
        """A queue offset below which nothing is pending."""
        return min(self.counts) * CHUNK if self.counts else loaded_to


class TimerService:
    def __init__(self, broker: "Broker", clock: Callable[[], float] = time.time):
        self.broker = broker
        self.store = broker.store
        self.clock = clock
        self.wheel: TimerWheel | None = None  # None: to be rebuilt (not master before)
        self.loaded_to = 0
        self.delivered = 0

    def clock_ms(self) -> int:
        return int(self.clock() * 1000)

    async def run(self) -> None:
        def forget_wheel() -> None:  # rebuilt from the log once master again
            self.wheel = None
        # a tick each TICK_S while timers are due (requests get in between busy ticks);
        # otherwise it rests until the next is due or a new one is stored
        await run_rounds("timer", TICK_S, self._tick_round,
                         active=lambda: self.broker.mode.is_writable, on_inactive=forget_wheel,
                         rest=self._rest, inactive_s=INACTIVE_S)

    def _tick_round(self) -> None:
        self.tick()

    async def _rest(self) -> None:
        """Until the next timer is due or a new timer message is stored, at most IDLE_S: an
        idle broker does not wake every TICK_S (that was ~5% of a core, idle)."""
        due = self.wheel.next_due_ms() if self.wheel is not None else None
        wait = IDLE_S if due is None else min(IDLE_S, (due - self.clock_ms()) / 1000)
        holds = self.broker.holds
        if wait <= TICK_S or holds is None or \
                self.store.max_offset_in_queue(TIMER_TOPIC, 0) > self.loaded_to:
            await asyncio.sleep(TICK_S)  # (due soon, or stored and not loaded yet)
            return
        await holds.wait(TIMER_TOPIC, 0, self.loaded_to, wait)

    def tick(self) -> int:
        """Load new timers, deliver the due ones; how many were delivered."""
        if self.wheel is None:
            self.wheel = TimerWheel()
            self.loaded_to = self.broker.offsets.query(TIMER_TOPIC, TIMER_GROUP, 0) or 0
        self._load()
        now = self.clock_ms()
        due = self.wheel.due(now, TICK_MAX)
        sent = 0
        for i, qoff in enumerate(due):
            if not self._deliver(qoff):
                for rest in due[i:]:  # refused (disk full...): due again next tick
                    self.wheel.add(now, rest)
                    self.wheel.done(rest)
                break
            self.wheel.done(qoff)
            sent += 1
        if sent:
            self.broker.offsets.commit(TIMER_TOPIC, TIMER_GROUP, 0,
                                       self.wheel.low_mark(self.loaded_to))
        return sent

    def _load(self) -> None:
        store, wheel = self.store, self.wheel
        assert wheel is not None  # (tick makes it first)
        end = min(store.max_offset_in_queue(TIMER_TOPIC, 0), self.loaded_to + 4 * LOAD_BATCH)
        at = max(self.loaded_to, store.min_offset_in_queue(TIMER_TOPIC, 0))
        while at < end:
            got = store.get_messages(TIMER_TOPIC, 0, at, max_count=LOAD_BATCH)
            for raw in got.messages():
                try:
                    msg = decode_message(raw, check_crc=False)
                    wheel.add(int(msg.properties[PROPERTY_TIMER_OUT_MS]), msg.queue_offset)
                except (MessageFormatError, KeyError, ValueError) as e:
                    log.error("timer message at queue offset %d unreadable (%s): dropped", at, e)
            at = max(got.next_begin_offset, at + (got.message_count == 0))
        self.loaded_to = at

    def _deliver(self, qoff: int) -> bool:
        got = self.store.get_messages(TIMER_TOPIC, 0, qoff, max_count=1)
        if not got.message_count:
            log.error("timer message at queue offset %d is gone: not delivered", qoff)
            return True
        try:
            msg = decode_message(got.messages()[0])
            props = dict(msg.properties)
            topic, qid = parked_destination(props)
        except (BadParked, MessageFormatError) as e:  # never blocks the timer for good
            log.error("timer message at queue offset %d: %s; dropped", qoff, e)
            return True
        props.pop(PROPERTY_REAL_TOPIC, None)
        props.pop(PROPERTY_REAL_QUEUE_ID, None)
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if uniq and self._delivered_before(topic, uniq):
            return True
        self.broker.topics.for_delivery(topic, qid)
        try:
            encoded = self.store.encode_again(msg, topic, qid, props)
        except MessageFormatError as e:
            log.error("timer message at queue offset %d cannot be delivered (%s); dropped",
                      qoff, e)
            return True
        result = self.broker.mode.write_internal(encoded)
        if not result.ok:
            log.warning("timer delivery to %s refused: %s", topic, result.error)
            return False
        self.delivered += 1
        return True

    def _delivered_before(self, topic: str, uniq: str) -> bool:
        try:
            return bool(self.store.query_by_key(topic, uniq, 1))
        except StoreError:  # no key index: at least once
            return False
