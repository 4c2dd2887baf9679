"""TransactionProducer: RocketMQ's transactional messages. A half message is sent first
(stored, invisible to consumers); the local transaction runs; its outcome commits or rolls
the message back (END_TRANSACTION). An outcome of UNKNOW, or a producer that died before
telling, is settled later by the broker asking any live producer of the same group
(CHECK_TRANSACTION_STATE), which calls the check listener."""
from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from ..remoting import Connection, RemotingCommand, RemotingError, RequestCode, ResponseCode
from ..wire.message import (
    PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_KEY,
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
    StoredMessage, decode_message, decode_offset_msg_id,
)
from .instance import ClientInstance
from .message import Message, SendResult, SendStatus, properties_string
from .producer import Producer

log = logging.getLogger(__name__)


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # RocketMQ's spelling


_SYSFLAG = {LocalTransactionState.COMMIT_MESSAGE: SYSFLAG_TRANSACTION_COMMIT,
            LocalTransactionState.ROLLBACK_MESSAGE: SYSFLAG_TRANSACTION_ROLLBACK,
            LocalTransactionState.UNKNOW: 0}

LocalTransaction = Callable[[Message, Any], "LocalTransactionState | Awaitable[LocalTransactionState]"]
CheckListener = Callable[[StoredMessage], "LocalTransactionState | Awaitable[LocalTransactionState]"]


async def _call(fn: Callable[..., LocalTransactionState | Awaitable[LocalTransactionState]],
                *args: Any) -> LocalTransactionState:
    out = fn(*args)
    if asyncio.iscoroutine(out) or isinstance(out, asyncio.Future):
        out = await out
    return LocalTransactionState(out)


class TransactionProducer(Producer):
    """`check` answers the broker's question about a transaction this group left open: it
    gets the half message (its `uniq_key` is the transaction id) and returns the state."""

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *,
                 check: CheckListener | None = None, **kw: Any) -> None:
        instance = kw.pop("instance", None) or ClientInstance(
            namesrv, on_request=self._on_broker_request, tls=kw.get("tls"))
        super().__init__(group, namesrv, instance=instance, **kw)
        self.check = check
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> "TransactionProducer":
        await super().start()
        return self

    async def send_in_transaction(self, msg: Message, local: LocalTransaction,
                                  arg: Any = None) -> tuple[SendResult, LocalTransactionState]:
        """Send `msg` as a half message, run `local(msg, arg)`, and commit or roll back by
        what it returns (an exception rolls back). The half message stays until decided."""
        self._check(msg)
        props = msg.all_properties()
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        uniq = props.setdefault(PROPERTY_UNIQ_KEY, self._ids.next())
        result = await self._send_with_retries(
            msg.topic, None, None, msg, None,
            lambda q: self._request(RequestCode.SEND_MESSAGE_V2, msg.topic, q,
                                    properties_string(props), msg.body, msg.flag, False,
                                    SYSFLAG_TRANSACTION_PREPARED), uniq)
        if result.status is not SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK_MESSAGE  # not safely stored: do not run
        else:
            # the broker learns this group is live before it may need to check back
            await self.instance.heartbeat([self.group], [])
            try:
                state = await _call(local, msg, arg)
            except Exception:  # noqa: BLE001 - a failed local transaction rolls back
                log.exception("local transaction of %s failed: rolled back", uniq)
                state = LocalTransactionState.ROLLBACK_MESSAGE
        addr = self.instance.master_addr(result.queue.broker_name)
        if addr is not None:
            await self._end(addr, result.offset_msg_id, result.queue_offset, uniq, state, False)
        return result, state

    async def _end(self, addr: str, offset_msg_id: str, queue_offset: int, uniq: str,
                   state: LocalTransactionState, from_check: bool) -> None:
        """END_TRANSACTION, one-way as RocketMQ's clients send it."""
        phys = decode_offset_msg_id(offset_msg_id)[2]
        cmd = RemotingCommand(RequestCode.END_TRANSACTION, ext={
            "producerGroup": self.group, "tranStateTableOffset": str(queue_offset),
            "commitLogOffset": str(phys), "commitOrRollback": str(_SYSFLAG[state]),
            "fromTransactionCheck": str(from_check).lower(), "msgId": uniq,
            "transactionId": uniq})
        try:
            await self.instance.remoting.invoke_oneway(addr, cmd)
        except (RemotingError, OSError) as e:  # the broker's check-back settles it
            log.warning("END_TRANSACTION of %s to %s failed: %s", uniq, addr, e)

    # ---- the broker's check-back ----------------------------------------------------
    def _on_broker_request(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            t = asyncio.get_running_loop().create_task(self._answer_check(cmd, conn))
            self._checks.add(t)
            t.add_done_callback(self._checks.discard)
            return None
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"transaction producer does not serve code {cmd.code}")

    async def _answer_check(self, cmd: RemotingCommand, conn: Connection) -> None:
        ext = cmd.ext
        try:
            msg = decode_message(cast(bytes, cmd.body))  # a received body is bytes
        except Exception as e:  # noqa: BLE001 - a bad check is logged, not fatal
            log.warning("a transaction check from %s carried no readable message: %s",
                        conn.peer, e)
            return
        uniq = msg.properties.get(PROPERTY_UNIQ_KEY) or ext.get("transactionId", "")
        if self.check is None:
            log.warning("transaction %s checked, but this producer has no check listener", uniq)
            return
        try:
            state = await _call(self.check, msg)
        except Exception:  # noqa: BLE001 - unknown: the broker asks again later
            log.exception("transaction check of %s failed", uniq)
            return
        cmd_end = RemotingCommand(RequestCode.END_TRANSACTION, ext={
            "producerGroup": self.group, "tranStateTableOffset": ext["tranStateTableOffset"],
            "commitLogOffset": ext["commitLogOffset"], "commitOrRollback": str(_SYSFLAG[state]),
            "fromTransactionCheck": "true", "msgId": ext.get("msgId", uniq),
            "transactionId": uniq})
        try:
            conn.oneway(cmd_end)
        except RemotingError as e:
            log.warning("answering the check of %s failed: %s", uniq, e)


__all__ = ["LocalTransactionState", "TransactionProducer"]
