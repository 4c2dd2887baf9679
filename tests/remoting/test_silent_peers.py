"""A client connection whose peer says nothing for a whole request timeout is closed, so the
next request connects afresh (#34: after a partition heals, the old connection's segments
wait out TCP's retransmission backoff, seconds; a new connection gets through at once). A
peer that answers other requests meanwhile is slow, not gone: its connection stays. Off by
default: a broker's link to a name server keeps its connection (its close would unregister
the broker)."""
import asyncio

import pytest

from ledgermq.remoting import RemotingCommand, ResponseCode
from ledgermq.remoting import RemotingClient, RemotingServer, RemotingTimeout

IGNORED, PING = 9001, 9002


async def server():
    """Answers PING at once; every other request is never answered."""
    def handle(cmd, conn):
        return cmd.response(ResponseCode.SUCCESS) if cmd.code == PING else \
            asyncio.get_running_loop().create_future()  # (never done)
    s = RemotingServer(handle, "127.0.0.1", 0)
    await s.start()
    return s


def test_a_silent_peer_is_dropped_and_the_next_request_reconnects():
    async def main():
        s = await server()
        client = RemotingClient(drop_silent=True)
        try:
            with pytest.raises(RemotingTimeout):
                await client.invoke(s.address, RemotingCommand(IGNORED), timeout=0.3)
            for _ in range(100):  # (the sweep runs every 50 ms)
                if client.open_connection(s.address) is None:
                    break
                await asyncio.sleep(0.02)
            assert client.open_connection(s.address) is None
            r = await client.invoke(s.address, RemotingCommand(PING), timeout=2)
            assert r.code == ResponseCode.SUCCESS
            assert len(s.connections) >= 1
        finally:
            await client.close()
            await s.stop()
    asyncio.run(main())


def test_a_peer_that_answers_other_requests_keeps_its_connection():
    async def main():
        s = await server()
        client = RemotingClient(drop_silent=True)
        try:
            first = await client.connection(s.address)
            ignored = asyncio.ensure_future(
                client.invoke(s.address, RemotingCommand(IGNORED), timeout=0.5))
            while not ignored.done():  # the peer keeps answering meanwhile
                await client.invoke(s.address, RemotingCommand(PING), timeout=2)
                await asyncio.sleep(0.05)
            with pytest.raises(RemotingTimeout):
                await ignored
            assert client.open_connection(s.address) is first
        finally:
            await client.close()
            await s.stop()
    asyncio.run(main())


def test_off_by_default_a_silent_peer_keeps_its_connection():
    """A broker's link to a name server: closing it would unregister the broker there."""
    async def main():
        s = await server()
        client = RemotingClient()
        try:
            first = await client.connection(s.address)
            with pytest.raises(RemotingTimeout):
                await client.invoke(s.address, RemotingCommand(IGNORED), timeout=0.3)
            # (a drop would be decided with the timeout itself: abort marks it closing)
            assert client.open_connection(s.address) is first
        finally:
            await client.close()
            await s.stop()
    asyncio.run(main())
