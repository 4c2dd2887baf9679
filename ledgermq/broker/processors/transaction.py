"""END_TRANSACTION: a producer's decision on its half message (RocketMQ's
EndTransactionProcessor). RocketMQ's clients send it one-way, so the answer only helps
ledgermq's own client and operators reading logs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...remoting.transport import Handler
from ...store import StoreError
from ...wire.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK, MessageFormatError,
)

if TYPE_CHECKING:
    from ..broker import Broker

_DECISIONS = {SYSFLAG_TRANSACTION_COMMIT: True, SYSFLAG_TRANSACTION_ROLLBACK: False}


class TransactionProcessor:
    def __init__(self, broker: "Broker"):
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.END_TRANSACTION: self.end_transaction}

    def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        why = self.broker.mode.refuse_write()
        if why is not None:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"transaction not ended here: {why}")
        ext = cmd.ext
        kind = int(ext["commitOrRollback"])
        if kind not in _DECISIONS:  # UNKNOW: the check-back will ask again
            return cmd.response(ResponseCode.SUCCESS, "undecided: left for the check-back")
        try:
            done = self.broker.transactions.end(int(ext["commitLogOffset"]), _DECISIONS[kind],
                                                ext.get("producerGroup") or "")
        except (StoreError, MessageFormatError, ValueError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"transaction {ext.get('transactionId')}: {e}")
        return cmd.response(ResponseCode.SUCCESS, f"transaction {ext.get('transactionId')} "
                            f"{done}")
