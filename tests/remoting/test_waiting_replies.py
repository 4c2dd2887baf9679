"""Replies to requests that wait for an event (a commit, a flush: a handler's ReplyWhen).

A lone waiting request (a sync send) is answered in the very callback that completes it: a
further loop turn would let other sockets' reads run first and delay the answer. Replies
completed together while more of the connection's requests still wait are gathered into one
write (a pipelining client gets one write per event, not one per message)."""
import asyncio

from bench.request_micro import CountingTransport
from ledgermq.remoting import RemotingCommand, ReplyWhen, ResponseCode
from ledgermq.remoting.command import decode_frame
from ledgermq.remoting.transport import Connection

WAIT = 9003


class RecordingTransport(CountingTransport):
    """Keeps each write as the opaques of the frames it held."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[int]] = []

    def writelines(self, buffers) -> None:
        data = b"".join(buffers)
        opaques, pos = [], 0
        while pos < len(data):
            size = int.from_bytes(data[pos:pos + 4], "big")
            opaques.append(decode_frame(data[pos + 4:pos + 4 + size]).opaque)
            pos += 4 + size
        self.writes.append(opaques)


def waiting_connection(events: dict[int, asyncio.Future]):
    """A connection whose handler answers request `opaque` once events[opaque] is done."""
    def handle(cmd, conn):
        return ReplyWhen(events[cmd.opaque], lambda value: cmd.response(ResponseCode.SUCCESS))
    conn = Connection(handle)
    transport = RecordingTransport()
    conn.connection_made(transport)
    return conn, transport


def request(opaque: int) -> bytes:
    cmd = RemotingCommand(WAIT)
    cmd.opaque = opaque
    return b"".join(cmd.encode())


def test_a_lone_waiting_request_is_answered_in_the_callback_that_completes_it():
    async def main():
        loop = asyncio.get_running_loop()
        event = loop.create_future()
        conn, transport = waiting_connection({1: event})
        conn.data_received(request(1))
        seen = []
        event.set_result(None)  # its done callback is queued first: the reply's
        loop.call_soon(lambda: seen.append(list(transport.writes)))  # then this one
        for _ in range(10):
            if seen:
                break
            await asyncio.sleep(0)
        assert seen == [[[1]]]
    asyncio.run(main())


def test_replies_completed_together_go_out_in_one_write_while_others_wait():
    async def main():
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        conn, transport = waiting_connection({1: first, 2: first, 3: first, 4: second})
        conn.data_received(b"".join(request(i) for i in (1, 2, 3, 4)))
        first.set_result(None)
        for _ in range(10):
            if transport.writes:
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0)  # (a turn more: no second write of the first three)
        assert transport.writes == [[1, 2, 3]]
        second.set_result(None)
        for _ in range(10):
            if len(transport.writes) > 1:
                break
            await asyncio.sleep(0)
        assert transport.writes == [[1, 2, 3], [4]]
        assert conn.in_flight == 0
    asyncio.run(main())
