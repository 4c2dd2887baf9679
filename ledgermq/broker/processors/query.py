"""Questions about stored messages: queue bounds, offsets by time, a message by its
offset id, messages by key (RocketMQ's QueryMessageProcessor and the offset queries)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...remoting.transport import Handler
from ...runtime.clock import wall_ms
from ...store import StoreError
from ...wire.message import MessageFormatError, decode_message

if TYPE_CHECKING:
    from ..broker import Broker


class QueryProcessor:
    def __init__(self, broker: "Broker"):
        self.store = broker.store

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.offset_by_time,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_by_id,
            RequestCode.QUERY_MESSAGE: self.query_message,
        }

    def max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        off = self.store.max_offset_in_queue(cmd.ext["topic"], int(cmd.ext["queueId"]))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        off = self.store.min_offset_in_queue(cmd.ext["topic"], int(cmd.ext["queueId"]))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def offset_by_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        off = self.store.offset_by_time(cmd.ext["topic"], int(cmd.ext["queueId"]),
                                        int(cmd.ext["timestamp"]))
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(off)})

    def earliest_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic, qid = cmd.ext["topic"], int(cmd.ext["queueId"])
        got = self.store.get_messages(topic, qid, self.store.min_offset_in_queue(topic, qid), 1)
        ts = decode_message(got.messages()[0]).store_timestamp if got.message_count else -1
        return cmd.response(ResponseCode.SUCCESS, None, {"timestamp": str(ts)})

    def view_by_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        phys = int(cmd.ext["offset"])
        try:
            size = self.store.commitlog.size_at(phys)
            data = bytes(self.store.commitlog.read(phys, size))
            decode_message(data)
        except (StoreError, MessageFormatError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"can not find message by the offset, {phys}: {e}")
        return cmd.response(ResponseCode.SUCCESS, None, None, data)

    def query_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ext = cmd.ext
        try:
            msgs = self.store.query_by_key(ext["topic"], ext["key"], int(ext.get("maxNum", 32)),
                                           int(ext.get("beginTimestamp", 0)),
                                           int(ext.get("endTimestamp", 1 << 62)))
        except StoreError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if not msgs:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                "can not find message, maybe time range not correct")
        body = [self.store.commitlog.read(m.phys_offset, m.total_size) for m in msgs]
        return cmd.response(ResponseCode.SUCCESS, None, {
            "indexLastUpdateTimestamp": str(wall_ms()),
            "indexLastUpdatePhyoffset": str(self.store.commitlog.max_offset)}, body)
