"""Transactional messages, as RocketMQ keeps them: a half message waits, invisible, in
RMQ_SYS_TRANS_HALF_TOPIC until its producer commits it (it is then written to its real topic
and queue) or rolls it back; each decision is a message in RMQ_SYS_TRANS_OP_HALF_TOPIC whose
body is the half message's queue offset. Both topics live in the commit log, so a restarted
broker or a new master knows what is decided by reading the op topic.

Half messages left undecided longer than `transactionTimeOut` are checked back with their
producer group (CHECK_TRANSACTION_STATE, one-way, on a live connection of the group) by
the writable master only. Before each check the half message is written again with its
check count raised and the old copy marked decided, so the count survives restarts and
failovers; after `transactionCheckMax` checks it goes to TRANS_CHECK_MAX_TIME_TOPIC.
Progress over the half queue is the internal group CID_RMQ_SYS_TRANS's consumer offset.

At least once: a broker that dies between writing a commit and its op record checks the
half message back again, and a second commit of it is a duplicate (as in RocketMQ).
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, cast

from ...remoting import RemotingCommand, RemotingError, RequestCode
from ...store import StoreError
from ...wire.message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC, PROPERTY_TRANSACTION_CHECK_TIMES, PROPERTY_UNIQ_KEY,
    SYSFLAG_TRANSACTION_MASK, Message, MessageFormatError, StoredMessage, decode_message,
    encode_message, encode_properties, offset_msg_id,
)
from ..access.system_topics import TRANS_CHECK_MAX_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC
from ..send_parsing import index_keys, tags_of, with_properties
from .parked import BadParked, parked_destination
from .rounds import run_rounds

if TYPE_CHECKING:
    from ...wire.batch import EncodedBatch
    from ..broker import Broker

log = logging.getLogger(__name__)

CHECK_GROUP = "CID_RMQ_SYS_TRANS"
OP_TAG = "d"  # RocketMQ's tag of a "decided" op record
SCAN_BATCH = 256


def to_half(props: bytes, topic: str, queue_id: int) -> bytes:
    """Properties of a half message parked in the half topic."""
    return with_properties(props, {PROPERTY_REAL_TOPIC: topic,
                                   PROPERTY_REAL_QUEUE_ID: str(queue_id)})


class Transactions:
    def __init__(self, broker: "Broker", clock: Callable[[], float] = time.time):
        self.broker = broker
        self.store = broker.store
        self.config = broker.config
        self.clock = clock
        # half queue offsets with a decision, at or above `floor`: below it every one is
        # decided (the check-back's progress), so the set stays as small as what is open
        self.decided: set[int] = set()
        self.floor = 0
        self._op_read = 0  # the op queue is read up to here into `decided`
        self.checks_sent = 0

    # ---- decisions --------------------------------------------------------------------
    def refresh_decided(self) -> None:
        """Read the op records written since the last look (ours or replicated)."""
        store = self.store
        end = store.max_offset_in_queue(TRANS_OP_TOPIC, 0)
        at = max(self._op_read, store.min_offset_in_queue(TRANS_OP_TOPIC, 0))
        while at < end:
            got = store.get_messages(TRANS_OP_TOPIC, 0, at, max_count=SCAN_BATCH)
            for raw in got.messages():
                try:
                    self.decided.add(int(decode_message(raw).body))
                except (MessageFormatError, ValueError):
                    log.warning("op record at queue offset %d is unreadable; skipped", at)
            at = max(got.next_begin_offset, at + (got.message_count == 0))
        self._op_read = at

    def half_at(self, phys: int) -> StoredMessage:
        msg = self.store.message_at(phys)
        if msg.topic != TRANS_HALF_TOPIC:
            raise ValueError(f"the message at commit-log offset {phys} is not a half message "
                             f"(it is in {msg.topic})")
        return msg

    def end(self, phys: int, commit: bool, producer_group: str) -> str:
        """Commit or roll back the half message at commit-log offset `phys`; what was done.
        A decision already taken is kept (a second END_TRANSACTION changes nothing). Only
        the producer group that sent the half message decides it (as RocketMQ's): an
        offset is easy to guess."""
        msg = self.half_at(phys)
        if msg.properties.get(PROPERTY_PRODUCER_GROUP) != producer_group:
            raise ValueError(f"The producer group wrong: the half message at {phys} belongs "
                             f"to another producer group than {producer_group[:128]!r}")
        self.refresh_decided()
        floor = max(self.floor, self.broker.offsets.query(TRANS_HALF_TOPIC, CHECK_GROUP, 0) or 0)
        if msg.queue_offset < floor or msg.queue_offset in self.decided:
            return "already decided"
        if commit:
            self._write_real(msg)
        self._decide(msg.queue_offset)
        return "committed" if commit else "rolled back"

    def _write_real(self, msg: StoredMessage, topic: str | None = None, qid: int | None = None
                    ) -> None:
        props = dict(msg.properties)
        if topic is None:
            try:
                topic, qid = parked_destination(props)
            except BadParked as e:
                log.error("half message at %d: %s; not written", msg.phys_offset, e)
                return
        props.pop(PROPERTY_REAL_TOPIC, None)
        props.pop(PROPERTY_REAL_QUEUE_ID, None)
        qid = 0 if qid is None else qid
        props.pop(PROPERTY_TRANSACTION_CHECK_TIMES, None)
        self.broker.topics.for_delivery(topic, qid)
        self._write(self.store.encode_again(
            msg, topic, qid, props, sys_flag=msg.sys_flag & ~SYSFLAG_TRANSACTION_MASK), topic)

    def _decide(self, half_offset: int) -> None:
        raw = encode_properties({"TAGS": OP_TAG})
        self._write(self.store.encode(TRANS_OP_TOPIC, 0, [str(half_offset).encode()], raw,
                                      OP_TAG), TRANS_OP_TOPIC)
        self.decided.add(half_offset)

    def _write(self, encoded: EncodedBatch, what: str) -> None:
        result = self.broker.mode.write_internal(encoded)
        if not result.ok:
            raise StoreError(f"writing to {what} refused: {result.error}")

    # ---- check-back -------------------------------------------------------------------
    async def run(self) -> None:
        await run_rounds("transaction check", self.config.transactionCheckInterval / 1000,
                         self._check_round,
                         active=lambda: self.broker.mode.is_writable)

    def _check_round(self) -> None:
        self.check_round()

    def check_round(self) -> int:
        """Check back every half message undecided for too long; how many were checked."""
        self.refresh_decided()
        offsets, store = self.broker.offsets, self.store
        start = max(offsets.query(TRANS_HALF_TOPIC, CHECK_GROUP, 0) or 0,
                    store.min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        end = store.max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        now_ms = int(self.clock() * 1000)
        at, progress, checked = start, start, 0
        while at < end:
            got = store.get_messages(TRANS_HALF_TOPIC, 0, at, max_count=SCAN_BATCH)
            msgs = [decode_message(raw) for raw in got.messages()]
            if not msgs:
                at = max(got.next_begin_offset, at + 1)
                continue
            for msg in msgs:
                at = msg.queue_offset + 1
                if msg.queue_offset in self.decided:
                    if progress == msg.queue_offset:
                        progress = at
                    continue
                if not self._due(msg, now_ms):
                    continue  # younger: looked at again next round
                self._check(msg)
                checked += 1
                if progress == msg.queue_offset:
                    progress = at
        offsets.commit(TRANS_HALF_TOPIC, CHECK_GROUP, 0, progress)
        if progress > self.floor:
            self.floor = progress
            self.decided = {o for o in self.decided if o >= progress}
        return checked

    def _due(self, msg: StoredMessage, now_ms: int) -> bool:
        wait_ms = self.config.transactionTimeOut
        immunity = msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        if immunity and immunity.isdigit() and int(immunity) * 1000 > wait_ms:
            wait_ms = int(immunity) * 1000
        return now_ms - msg.store_timestamp >= wait_ms

    def _check(self, msg: StoredMessage) -> None:
        """Write the half message again with its check count raised (and the old copy
        decided), then ask its producer group about the new copy; past the maximum, move
        it to TRANS_CHECK_MAX_TIME_TOPIC instead."""
        times = int(msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0") or 0)
        if times >= self.config.transactionCheckMax:
            log.warning("transaction %s of %s checked %d times: discarded to %s",
                        msg.properties.get(PROPERTY_UNIQ_KEY), msg.properties.get(
                            PROPERTY_PRODUCER_GROUP), times, TRANS_CHECK_MAX_TOPIC)
            self._write_real(msg, TRANS_CHECK_MAX_TOPIC, 0)
            self._decide(msg.queue_offset)
            return
        raw = encode_properties({**msg.properties,
                                 PROPERTY_TRANSACTION_CHECK_TIMES: str(times + 1)})
        encoded = self.store.encode(TRANS_HALF_TOPIC, 0, [msg.body], raw, tags_of(raw),
                                    flag=msg.flag, sys_flag=msg.sys_flag,
                                    born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                                    reconsume_times=msg.reconsume_times,
                                    index_keys=[index_keys(raw)])
        result = self.broker.mode.write_internal(encoded)
        if not result.ok:
            raise StoreError(f"writing the half message back refused: {result.error}")
        self._decide(msg.queue_offset)
        assert result.phys_offsets is not None  # (an appended batch's)
        self._ask(msg.properties.get(PROPERTY_PRODUCER_GROUP, ""), int(result.phys_offsets[0]),
                  result.queue_offset, msg.properties.get(PROPERTY_UNIQ_KEY, ""))

    @staticmethod
    def _as_sent(half: StoredMessage) -> bytes:
        """A half message as a check-back carries it (RocketMQ's): in the topic and queue
        its producer sent it to, which its check listener sees (and a RocketMQ 5 client
        answers with)."""
        topic, qid = parked_destination(half.properties)
        # (a StoredMessage has every field encode_message reads of a Message)
        return encode_message(cast(Message, replace(half, topic=topic, queue_id=qid)),
                              queue_offset=half.queue_offset, phys_offset=half.phys_offset,
                              store_timestamp=half.store_timestamp, store_host=half.store_host)

    def _ask(self, group: str, phys: int, queue_offset: int, uniq: str) -> None:
        conns = [c for c in self.broker.client_connections()
                 if c.is_open and group in c.attrs.get("producer_groups", ())]
        if not conns:
            log.info("transaction %s: no producer of group %s online to check with", uniq,
                     group)
            return
        try:
            half = self._as_sent(self.store.message_at(phys))
        except (StoreError, MessageFormatError, BadParked) as e:
            log.warning("transaction %s: the half message at %d cannot be read: %s", uniq,
                        phys, e)
            return
        msg_id = offset_msg_id(self.broker.store_host, phys)
        cmd = RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext={
            "tranStateTableOffset": str(queue_offset), "commitLogOffset": str(phys),
            "msgId": uniq or msg_id, "transactionId": uniq, "offsetMsgId": msg_id},
            body=half)
        conn = conns[self.checks_sent % len(conns)]
        self.checks_sent += 1
        try:
            conn.oneway(cmd)
        except RemotingError as e:
            log.info("transaction %s: check with %s failed: %s", uniq, conn.peer, e)
