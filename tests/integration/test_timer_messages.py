"""Timer messages (RocketMQ 5's TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS) on a
real broker: not delivered before their time, delivered once after it to a fresh group,
refused above timerMaxDelaySec, and delivered exactly once across a restart, also those
that fell due while the broker was down."""
import asyncio
import time

import pytest

from ledgermq import Message, MQClientError, Producer
from ledgermq.remoting import ResponseCode

from ..wait import until
from .test_transactions import read_all


async def when_readable(namesrv: str, topic: str, n: int, timeout: float = 20) -> float:
    """The time (time.time()) at which `topic` first holds `n` messages."""
    async def enough():
        return len(await read_all(namesrv, topic)) >= n
    await until(enough, f"{n} messages in {topic}", timeout=timeout, interval=0.05)
    return time.time()


@pytest.mark.parametrize("prop", ["TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"])
def test_a_timer_message_waits_until_its_time(dev, prop):
    d = dev()

    async def main():
        async with Producer("timer-p", d.namesrv) as p:
            sent = time.time()
            value = {"TIMER_DELIVER_MS": str(int(sent * 1000) + 2000), "TIMER_DELAY_SEC": "2",
                     "TIMER_DELAY_MS": "2000"}[prop]
            r = await p.send(Message("Later", b"due-in-2s", properties={prop: value}))
            assert r.status.value == "SEND_OK"
            assert await read_all(d.namesrv, "Later") == []  # not yet (RocketMQ 4: at once)
            at = await when_readable(d.namesrv, "Later", 1)
            assert at - sent >= 1.99, f"delivered {at - sent:.2f} s after sending"
            assert at - sent < 4.0
            await asyncio.sleep(0.5)  # delivered once, not again
            assert await read_all(d.namesrv, "Later") == [b"due-in-2s"]
    asyncio.run(main())


def test_a_delay_above_the_maximum_is_refused_and_a_past_time_is_delivered_at_once(dev):
    d = dev({"timerMaxDelaySec": "60"})

    async def main():
        async with Producer("timer-max", d.namesrv, retry_times=0) as p:
            with pytest.raises(MQClientError) as e:
                await p.send(Message("Far", b"x", properties={"TIMER_DELAY_SEC": "61"}))
            assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "timerMaxDelaySec=60" in str(e.value)
            await p.send(Message("Past", b"y", deliver_time_ms=int(time.time() * 1000) - 5))
            assert await read_all(d.namesrv, "Past") == [b"y"]
    asyncio.run(main())


def test_timers_pending_over_a_restart_are_delivered_once(dev, tmp_path):
    d = dev(data=tmp_path / "broker")
    ports = d.ports

    async def send():
        async with Producer("timer-r", d.namesrv) as p:
            now = int(time.time() * 1000)
            for i in range(20):  # half fall due while the broker is down
                await p.send(Message("Restart", f"t{i}".encode(),
                                     deliver_time_ms=now + (1500 if i % 2 else 6000)))
    asyncio.run(send())
    d.stop()
    time.sleep(2)  # not synchronization: the downtime the early timers fall due in
    d.start(*ports)

    async def check():
        await when_readable(d.namesrv, "Restart", 10, timeout=10)
        await when_readable(d.namesrv, "Restart", 20, timeout=15)
        await asyncio.sleep(1.0)  # more ticks: nothing delivered twice
        got = sorted(await read_all(d.namesrv, "Restart"))
        assert got == sorted(f"t{i}".encode() for i in range(20))
    asyncio.run(check())
