"""The broker's POP service: hands out messages of a topic (and of the group's retry topic)
across all its queues on this master, takes acks and invisibility changes, and revives
deliveries not acked in time (bookkeeping.py has the bookkeeping and its rules).

What replicates: every ack, written to the commit log (rmq_sys_POP_ACK) and answered once
the mode acknowledges that write (flushed, copied to a slave, committed by a quorum: the
mode's own promise); every revived message (a write to the retry topic, then a record of
the offset done); and the group's consumer offsets (`committed`), saved and copied to
followers like any. A new master starts from its committed offsets and the acks logged in
the last MAX_INVISIBLE_MS: what was received and not acked before a failover is delivered
again, what was acked is not."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from ...remoting.codes import PERM_READ, RETRY_PREFIX
from ...runtime.clock import wall_ms
from ...store import EncodedBatch, GetStatus, PutResult, PutStatus
from ...wire.message import (
    PROPERTY_UNIQ_KEY, MessageFormatError, StoredMessage, decode_message,
    queue_offset_and_reconsume,
)
from ..access.system_topics import POP_ACK_TOPIC
from ..delivery.redelivery import redelivery
from ..delivery.rounds import run_rounds
from ..modes import Later, Pending
from ..refusals import Kind, Refused
from .ack_log import AckLog
from .bookkeeping import Deadlines, Handle, Key, PopQueue

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

REVIVE_EVERY_S = 0.1
COMPACT_AT_LEAST = 4096  # deadline entries kept before stale ones are swept out
PRUNE_EVERY_S = 10.0  # queues with nothing in flight are forgotten this often
POP_ACTIVE_S = 60.0  # a group that popped this recently consumes by POP (one model a group)
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 1_000, 12 * 3600 * 1000  # RocketMQ's bounds
# an ack older than the longest invisible time is within its queue's committed offset:
# past every gap below it (each gap was acked or revived by then), copied to followers
ACK_REPLAY_WINDOW_MS = MAX_INVISIBLE_MS + 60_000
ACK_REPLAY_MAX = 1_000_000  # acked offsets a new master keeps from the ack log, at most


def ack_record(key: Key, offsets: list[int]) -> bytes:
    group, topic, qid = key
    return f"{group}\n{topic}\n{qid}\n{','.join(map(str, offsets))}".encode()


def parse_ack_record(body: bytes) -> tuple[Key, list[int]]:
    group, topic, qid, offsets = body.decode().split("\n")
    return (group, topic, int(qid)), [int(o) for o in offsets.split(",") if o]


@dataclass
class Popped:
    handle: Handle
    attempt: int          # 1 for a first delivery
    invisible_ms: int
    raw: bytes            # the message as stored (a remoting pop answers with these)
    decoded: StoredMessage | None = None

    @property
    def message(self) -> StoredMessage:
        """Decoded on first use (a remoting pop answers with the stored bytes)."""
        if self.decoded is None:
            self.decoded = decode_message(self.raw, check_crc=False)
        return self.decoded


def check_invisible_ms(invisible_ms: int) -> None:
    """Refused (RocketMQ's proxy's words) for an invisible duration out of bounds."""
    if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
        size = "large" if invisible_ms > MAX_INVISIBLE_MS else "small"
        raise Refused(Kind.INVISIBLE_TIME, f"the invisibleTime is too {size}: {invisible_ms} "
                      f"ms is out of [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms")


class PopService:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.store = broker.store
        self.queues: dict[Key, PopQueue] = {}
        self._logged_acks: dict[Key, set[int]] | None = None  # replayed, on first use
        # the replay on a worker thread
        self._replaying: asyncio.Future[dict[Key, set[int]]] | None = None
        self._generation = 0  # role changes: a replay of an earlier one is dropped
        self.fifo_groups: set[str] = set()
        self.deadlines = Deadlines()
        self._last_stamp = 0
        self._rotation = 0
        self._popped_at: dict[str, float] = {}  # group -> when it last received (monotonic)
        self._compact_at = COMPACT_AT_LEAST
        self._pruned_at = time.monotonic()
        self._ack_log = AckLog(self._write_acks)

    # ---- state ----------------------------------------------------------------------
    def reset(self) -> None:
        """The role changed: whatever was out is unknown to a new master; start again
        from the committed offsets (what was out is delivered again)."""
        self.queues.clear()
        self.deadlines = Deadlines()
        self._logged_acks, self._replaying = None, None
        self._generation += 1

    def _stamp(self) -> int:
        self._last_stamp = max(wall_ms(), self._last_stamp + 1)
        return self._last_stamp

    def forget(self, group: str, topic: str, qid: int) -> None:
        """The group's offset was set from outside: start over from it."""
        self.queues.pop((group, topic, qid), None)

    def consuming(self, group: str) -> bool:
        """True while `group` consumes by POP (it received within POP_ACTIVE_S)."""
        at = self._popped_at.get(group)
        return at is not None and time.monotonic() - at < POP_ACTIVE_S

    def pops(self, group: str, topic: str) -> bool:
        """Whether `group` consumes `topic` by POP here now (RocketMQ's proxy sends no
        consumer heartbeat: its groups are known by their pops)."""
        return self.consuming(group) and any(k[0] == group and k[1] == topic
                                             for k in self.queues)

    def _queue(self, group: str, topic: str, qid: int) -> PopQueue:
        key = (group, topic, qid)
        pq = self.queues.get(key)
        if pq is None:
            committed = self.broker.offsets.query(topic, group, qid)
            if committed is None or committed < 0:
                # a new group reads what the queue still holds (RocketMQ's first
                # subscription of a queue never trimmed starts at its beginning)
                committed = self.store.min_offset_in_queue(topic, qid)
            pq = self.queues[key] = PopQueue(committed)
            pq.acked_before(self._replayed_acks().get(key, ()))
        return pq

    def _replayed_acks(self) -> dict[Key, set[int]]:
        """The acks logged within ACK_REPLAY_WINDOW_MS (read once per role change: by
        `ready` on a worker thread, else here)."""
        if self._logged_acks is None:
            self._logged_acks = self._read_ack_log()
        return self._logged_acks

    async def ready(self) -> None:
        """The ack log replayed off the event loop (once per role change) before a
        receive makes queue state."""
        while self._logged_acks is None:
            generation = self._generation
            if self._replaying is None:
                self._replaying = asyncio.get_running_loop().run_in_executor(
                    None, self._read_ack_log)
            try:
                acks = await self._replaying
            except Exception:  # (an unreadable log): what it held may be delivered again
                log.exception("pop: the ack log could not be replayed")
                acks = {}
            if generation == self._generation and self._logged_acks is None:
                self._logged_acks = acks

    def _read_ack_log(self) -> dict[Key, set[int]]:
        acked: dict[Key, set[int]] = {}
        kept = 0
        offset = self.store.offset_by_time(POP_ACK_TOPIC, 0,
                                           wall_ms() - ACK_REPLAY_WINDOW_MS)
        while kept < ACK_REPLAY_MAX:
            got = self.store.get_messages(POP_ACK_TOPIC, 0, offset, 1024, 4 << 20)
            if got.status != GetStatus.FOUND:
                break
            for raw in got.messages():
                try:
                    key, offs = parse_ack_record(decode_message(raw, check_crc=False).body)
                except (MessageFormatError, ValueError, UnicodeDecodeError):
                    continue  # (a record the broker did not write is skipped)
                # below the committed offset an ack says nothing more
                floor = self.broker.offsets.query(key[1], key[0], key[2]) or 0
                offs = [o for o in offs if o >= floor]
                if offs:
                    acked.setdefault(key, set()).update(offs)
                    kept += len(offs)
            offset = got.next_begin_offset
        if kept >= ACK_REPLAY_MAX:  # the rest may be delivered again: at least once
            log.warning("pop: the ack log holds more than %d acks past the committed "
                        "offsets; the rest are not replayed", ACK_REPLAY_MAX)
        return acked

    def _commit(self, group: str, topic: str, qid: int, pq: PopQueue) -> None:
        if self.broker.offsets.query(topic, group, qid) != pq.committed:
            self.broker.offsets.commit(topic, group, qid, pq.committed)

    def _queues_of(self, group: str, topic: str) -> list[tuple[str, int]]:
        """The queues a pop for `topic` reads: the topic's, then the group's retry topic's."""
        out = []
        for name in (topic, RETRY_PREFIX + group):
            tc = self.broker.topics.for_pull(name)
            if tc is not None and tc.perm & PERM_READ:
                out += [(name, q) for q in range(tc.readQueueNums)]
        return out

    # ---- pop ------------------------------------------------------------------------
    def pop(self, group: str, topic: str, max_count: int, invisible_ms: int, fifo: bool,
            tag_codes: Iterable[int] | None,
            predicate: Callable[[dict[str, str]], bool] | None,
            queue_id: int = -1) -> list[Popped]:
        """Up to `max_count` messages out now (nothing to wait for here), from every queue
        of the topic and the group's retry topic, or from the topic's queue `queue_id`.
        One delivery stamp for all of them (RocketMQ's pop answer has one pop time)."""
        check_invisible_ms(invisible_ms)
        if self.broker.topics.for_pull(topic) is None:
            raise Refused(Kind.TOPIC_NOT_FOUND, f"topic {topic} does not exist on "
                          f"{self.broker.config.brokerName}")
        if fifo:
            self.fifo_groups.add(group)
        self._popped_at[group] = time.monotonic()
        queues = self._queues_of(group, topic)
        if queue_id >= 0:
            queues = [q for q in queues if q == (topic, queue_id)]
        self._rotation += 1
        start = self._rotation % max(1, len(queues))
        stamp, now = self._stamp(), wall_ms()
        out: list[Popped] = []
        for name, qid in queues[start:] + queues[:start]:
            if len(out) >= max_count:
                break
            out += self._pop_queue(group, name, qid, max_count - len(out), invisible_ms, fifo,
                                   tag_codes, predicate, stamp, now)
        return out

    def _pop_queue(self, group: str, topic: str, qid: int, max_count: int, invisible_ms: int,
                   fifo: bool, tag_codes: Iterable[int] | None,
                   predicate: Callable[[dict[str, str]], bool] | None, stamp: int,
                   now: int) -> list[Popped]:
        pq = self._queue(group, topic, qid)
        if fifo and pq.blocked():
            return []
        got = self.store.get_messages(topic, qid, pq.cursor, max_count,
                                      self.broker.config.pullBatchMaxBytes, tag_codes)
        if got.status == GetStatus.OFFSET_TOO_SMALL:  # trimmed away: start at what is left
            pq.cursor = pq.committed = got.next_begin_offset
            got = self.store.get_messages(topic, qid, pq.cursor, max_count,
                                          self.broker.config.pullBatchMaxBytes, tag_codes)
        if got.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            return []
        # (queue offset, reconsume times, the stored bytes, decoded where a filter looked)
        msgs: list[tuple[int, int, bytes, StoredMessage | None]] = []
        for raw in got.messages():
            try:
                if predicate is None:  # nothing to decode: read two numbers in place
                    m = None
                    offset, reconsumed = queue_offset_and_reconsume(raw)
                else:
                    m = decode_message(raw, check_crc=False)
                    offset, reconsumed = m.queue_offset, m.reconsume_times
            except MessageFormatError:
                log.warning("pop: unreadable message in %s/%d skipped", topic, qid)
                continue
            if offset in pq.done:
                continue  # acked already (an earlier master logged it): not again
            if m is None or predicate(m.properties):  # type: ignore[misc]  # (set with m)
                msgs.append((offset, reconsumed, bytes(raw), m))
        handed = pq.hand_out([m[0] for m in msgs], got.next_begin_offset, now,
                             invisible_ms, stamp)
        self._commit(group, topic, qid, pq)
        broker = self.broker.config.brokerName
        self._deadlines_of((group, topic, qid), [off for off, _ in handed], now + invisible_ms,
                           stamp)
        return [Popped(Handle(broker, topic, qid, off, stamp, invisible_ms),
                       reconsumed + attempt, invisible_ms, stored, m)
                for (_, reconsumed, stored, m), (off, attempt) in zip(msgs, handed)]

    async def wait(self, group: str, topic: str, timeout_s: float) -> None:
        """Until a queue `pop` reads may have grown, or `timeout_s`."""
        holds = self.broker.holds
        assert holds is not None  # (made as the broker starts)
        waits = [asyncio.ensure_future(holds.wait(
            name, qid, self._queue(group, name, qid).cursor, timeout_s))
            for name, qid in self._queues_of(group, topic)]
        if not waits:
            await asyncio.sleep(timeout_s)
            return
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in pending:
            w.cancel()

    # ---- acks -----------------------------------------------------------------------
    def _delivered(self, group: str, handle: str | Handle, topic: str
                   ) -> tuple[Handle, PopQueue]:
        """The delivery a receipt handle names (as the gRPC client holds it, or as
        RocketMQ's proxy names it, already read), for `group` reading `topic` (a handle is
        the client's to send: one issued for another topic or group is refused, and one
        naming a queue with nothing in flight here makes no state)."""
        try:
            h = Handle.decode(handle) if isinstance(handle, str) else handle
        except ValueError as e:
            raise Refused(Kind.RECEIPT_HANDLE, str(e)) from None
        if h.broker != self.broker.config.brokerName:
            raise Refused(Kind.RECEIPT_HANDLE, f"receipt handle of broker {h.broker}, not of "
                          f"{self.broker.config.brokerName}")
        if h.topic not in (topic, RETRY_PREFIX + group):
            raise Refused(Kind.RECEIPT_HANDLE, f"receipt handle of topic {h.topic[:128]}, not of "
                          f"{topic[:128]} read by group {group[:128]}")
        pq = self.queues.get((group, h.topic, h.queue_id))
        if pq is None:
            raise Refused(Kind.RECEIPT_HANDLE, "the receipt handle expired: nothing of its "
                          "queue is in flight here for this group (delivered before a restart or "
                          "failover, or not issued here)")
        return h, pq

    def ack(self, group: str, handle: str | Handle, topic: str) -> tuple[Key, int]:
        """Done here at once; what to log (`log_acks`) before saying so."""
        h, pq = self._delivered(group, handle, topic)
        if not pq.ack(h.offset, h.stamp, h.expired(wall_ms())):
            raise Refused(Kind.RECEIPT_HANDLE, "the receipt handle expired: the message was "
                          "delivered again since (ack the newer delivery)")
        self._commit(group, h.topic, h.queue_id, pq)
        return (group, h.topic, h.queue_id), h.offset

    def _ack_batch(self, acks: list[tuple[Key, int]]) -> EncodedBatch:
        by_key: dict[Key, list[int]] = {}
        for key, offset in acks:
            by_key.setdefault(key, []).append(offset)
        bodies = [ack_record(k, offs) for k, offs in by_key.items()]
        return self.store.encode(POP_ACK_TOPIC, 0, bodies, b"")

    def log_acks(self, acks: list[tuple[Key, int]]) -> asyncio.Future[str | None]:
        """Write acks to the log: a future done once the mode acknowledged the write; None
        when it holds, else why (the acks hold here but may not survive a failover). Acks
        asked for in the same turn of the loop share one write (ack_log.py)."""
        if not acks:
            done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self._ack_log.log(acks)

    def _write_acks(self, acks: list[tuple[Key, int]]) -> str | None | Awaitable[str | None]:
        """The acks written: what the mode says of them, now or (an awaitable) later."""
        outcome: PutResult | Later | Pending = self.broker.mode.write(self._ack_batch(acks))
        if isinstance(outcome, Later):
            return _settled_acks(outcome)
        return _acks_verdict(outcome)

    def renew(self, group: str, handle: Handle, deadline: int) -> bool:
        """Keep a delivery out under its receipt handle until `deadline` (the gRPC
        auto-renew of PushConsumers); False once it is no longer out under it."""
        pq = self.queues.get((group, handle.topic, handle.queue_id))
        return pq is not None and pq.renew(handle.offset, handle.stamp, deadline)

    def change_invisible(self, group: str, handle: str | Handle, invisible_ms: int,
                         topic: str) -> Handle:
        check_invisible_ms(invisible_ms)
        h, pq = self._delivered(group, handle, topic)
        stamp = self._stamp()
        deadline = wall_ms() + invisible_ms
        if not pq.change_invisible(h.offset, h.stamp, deadline, stamp):
            raise Refused(Kind.RECEIPT_HANDLE, "the receipt handle expired: the message was "
                          "delivered again since, or acked")
        self._deadline(deadline, (group, h.topic, h.queue_id), h.offset, stamp)
        return Handle(h.broker, h.topic, h.queue_id, h.offset, stamp, invisible_ms)

    def dead_letter(self, group: str, handle: str, topic: str) -> None:
        """The consumer gave up on this delivery (its attempts ran out): to the group's
        dead-letter queue, done here."""
        h, pq = self._delivered(group, handle, topic)
        d = pq.inflight.get(h.offset)
        if d is None or d.stamp != h.stamp:
            raise Refused(Kind.RECEIPT_HANDLE, "the receipt handle expired: the message was "
                          "delivered again since, or acked")
        if not self._send_to_retry(group, h.topic, h.queue_id, h.offset, dead=True):
            raise Refused(Kind.STORE_REFUSED, "the dead-letter queue did not take the message")
        pq.revived(h.offset)
        self._commit(group, h.topic, h.queue_id, pq)
        self.broker.mode.write_internal(self._ack_batch([((group, h.topic, h.queue_id),
                                                           h.offset)]))

    # ---- revive ---------------------------------------------------------------------
    async def run(self) -> None:
        await run_rounds("pop revive", REVIVE_EVERY_S, self._revive_round,
                         active=lambda: self.broker.mode.is_writable)

    def _revive_round(self) -> bool:
        self.revive(wall_ms())
        if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
            self.prune()
        return False

    def _deadline(self, deadline: int, key: Key, offset: int, stamp: int) -> None:
        self._deadlines_of(key, (offset,), deadline, stamp)

    def _deadlines_of(self, key: Key, offsets: Iterable[int], deadline: int,
                      stamp: int) -> None:
        self.deadlines.add(deadline, key, offsets, stamp)
        if len(self.deadlines) > self._compact_at:
            self.deadlines.compact(self._is_out)
            self._compact_at = max(COMPACT_AT_LEAST, 2 * len(self.deadlines))

    def _is_out(self, key: Key, offset: int, stamp: int) -> bool:
        pq = self.queues.get(key)
        d = pq.inflight.get(offset) if pq is not None else None
        return d is not None and d.stamp == stamp

    def prune(self) -> None:
        """Forget queues with nothing in flight nor acked past their committed offset
        (their state is the committed offset, saved), and groups that stopped popping: a
        client naming new groups in a loop leaves nothing behind."""
        self._pruned_at = time.monotonic()
        for key in [k for k, pq in self.queues.items()
                    if not pq.inflight and not pq.done and not pq.attempts]:
            del self.queues[key]
        for group in [g for g, at in self._popped_at.items()
                      if self._pruned_at - at >= POP_ACTIVE_S]:
            del self._popped_at[group]
        self.fifo_groups &= {k[0] for k in self.queues} | set(self._popped_at)

    def revive(self, now: int) -> None:
        """Deliveries past their deadline: FIFO groups get them again in place, the others
        through the retry topic (or the dead-letter queue after retryMaxTimes)."""
        for key, offset, stamp in self.deadlines.due(now):
            pq = self.queues.get(key)
            d = pq.inflight.get(offset) if pq else None
            if d is None or d.stamp != stamp:
                continue  # acked, or extended since
            if d.deadline > now:  # renewed in place (auto-renew): due later
                self._deadline(d.deadline, key, offset, stamp)
                continue
            assert pq is not None  # (d is its delivery)
            group, topic, qid = key
            if group in self.fifo_groups:
                pq.rewind(offset)
                holds = self.broker.holds
                assert holds is not None  # (made as the broker starts)
                holds.notify(topic, qid, offset + 1)
                continue
            if not self._send_to_retry(group, topic, qid, offset):
                pq.inflight[offset].deadline = now + 1000  # the write failed: try again
                self._deadline(now + 1000, key, offset, stamp)
                continue
            pq.revived(offset)
            self._commit(group, topic, qid, pq)
            self.broker.mode.write_internal(self._ack_batch([(key, offset)]))

    def _send_to_retry(self, group: str, topic: str, qid: int, offset: int,
                       dead: bool = False) -> bool:
        got = self.store.get_messages(topic, qid, offset, 1)
        if got.status != GetStatus.FOUND:
            return True  # gone (trimmed): nothing to deliver again
        m = decode_message(got.messages()[0], check_crc=False)
        dest, dqid, props, _ = redelivery(self.broker, group, m,
                                          m.properties.get(PROPERTY_UNIQ_KEY), give_up=dead)
        encoded = self.store.encode_again(m, dest, dqid, props,
                                          reconsume_times=m.reconsume_times + 1)
        result = self.broker.mode.write_internal(encoded)
        if not result.ok:
            log.warning("pop: %s/%d@%d not revived: %s", topic, qid, offset, result.error)
        return result.ok


async def _settled_acks(later: Later) -> str | None:
    return _acks_verdict(later.settle(await later.future))


def _acks_verdict(outcome: PutResult | Pending) -> str | None:
    """None when the mode holds the acks' write, else why not."""
    if isinstance(outcome, Pending):
        return f"acks pending: {outcome.why}"
    if outcome.status is not PutStatus.PUT_OK:
        return f"acks not safe yet ({outcome.status.value}): {outcome.error}"
    return None
