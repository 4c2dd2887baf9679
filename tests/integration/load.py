"""Load under faults, shared by the replication tests: send continuously, deliver signals
to processes meanwhile, watch for the failover they cause, read everything back, and check
nothing acknowledged was lost."""
import asyncio
import os
import threading
import time
from dataclasses import dataclass

from ledgermq import Message, MQClientError, Producer, PullConsumer, PullStatus
from ledgermq.remoting import RemotingError

from ..wait import until, wait_until


@dataclass(frozen=True)
class Ack:
    """A SEND_OK: the queue and body sent, and when (time.monotonic()) the answer came."""
    queue_id: int
    body: bytes
    at: float


async def send_for(namesrv, seconds, acked, prefix, statuses=None, send_timeout=3.0):
    """Send one message at a time for `seconds`; record every SEND_OK as an Ack and count
    every status (or error) in `statuses`."""
    async with Producer("p-" + prefix, namesrv, retry_times=3, send_timeout=send_timeout) as p:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            body = f"{prefix}-{i}".encode()
            try:
                r = await p.send(Message("Replicated", body))
                status = r.status.value
                if status == "SEND_OK":
                    acked.append(Ack(r.queue.queue_id, body, time.monotonic()))
            except (MQClientError, RemotingError) as e:
                status = type(e).__name__
                await asyncio.sleep(0.1)  # pacing: no burst of failing sends (not a wait)
            if statuses is not None:
                statuses[status] = statuses.get(status, 0) + 1
            i += 1


async def read_all(namesrv, settle_s=10.0, topic="Replicated", by_broker=False):
    """{queue_id: [bodies in queue order]} of every queue of `topic` (keyed by (broker
    name, queue id) with `by_broker`, for a topic over several groups). A broker that just
    became master may not have re-registered its routes yet: asked again for up to
    `settle_s`."""
    async with PullConsumer("reader", namesrv) as c:
        out = {}
        queues = await until(lambda: c.fetch_queues(topic), f"the route of {topic}",
                             timeout=settle_s, interval=0.2)
        for q in queues:
            offset, got = 0, []
            while True:
                r = await c.pull(q, offset, 500)
                if r.status is not PullStatus.FOUND:
                    break
                got += [m.body for m in r.messages]
                offset = r.next_begin_offset
            out[(q.broker_name, q.queue_id) if by_broker else q.queue_id] = got
        return out


def until_read(namesrv: str, topic: str, n: int, timeout: float = 30.0) -> list[str]:
    """The topic's bodies as text, sorted, once it holds `n` (a delayed one comes after its
    delay)."""
    def bodies():
        got = sorted(b.decode() for q in asyncio.run(read_all(namesrv, topic=topic)).values()
                     for b in q)
        return got if len(got) >= n else None
    return wait_until(bodies, f"{n} messages in {topic}", timeout=timeout)


def check_nothing_lost(acked, stored):
    for qid in {a.queue_id for a in acked}:
        mine = [a.body for a in acked if a.queue_id == qid]
        have = stored.get(qid, [])
        missing = [b for b in mine if b not in set(have)]
        assert not missing, f"queue {qid}: {len(missing)} acknowledged messages lost"
        positions = [have.index(b) for b in mine]
        assert positions == sorted(positions), f"queue {qid}: order changed"


def under_load(ns, seconds, prefix, fault_at, *signals, statuses=None,
               send_timeout=3.0) -> list:
    """Send for `seconds`; at `fault_at` deliver `signals` (pid, signal, pause after) to
    processes. Returns what was acknowledged, as Acks in the order they came."""
    acked: list = []

    async def scenario():
        sender = asyncio.create_task(send_for(ns, seconds, acked, prefix, statuses,
                                              send_timeout))
        await asyncio.sleep(fault_at)  # the fault schedule, not a wait
        for pid, sig, pause in signals:
            os.kill(pid, sig)
            await asyncio.sleep(pause)
        await sender
    asyncio.run(scenario())
    return acked


def acked_after(acked, moment) -> list:
    """The Acks whose answer came after `moment` (a time.monotonic() value)."""
    return [a for a in acked if a.at > moment]


class Sighting:
    """Watches, from a thread, for a state a fault should bring about (a new master): polls
    `cond` (a blocking call such as the cluster's status) until it holds, and keeps the
    monotonic time it was first seen holding in `at`. Start it before the fault so `at` is
    when the state was observed, not when the test got round to asking.

        with Sighting(lambda: new_master(d), "a new master") as seen:
            acked = under_load(...)
        late = acked_after(acked, seen.wait())
    """

    def __init__(self, cond, what, timeout=30.0, interval=0.2):
        self.cond, self.what, self.timeout, self.interval = cond, what, timeout, interval
        self.at: float | None = None
        self.value = None
        self._last = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"sighting {what}",
                                        daemon=True)

    def _watch(self) -> None:
        end = time.monotonic() + self.timeout
        while not self._stop.is_set() and time.monotonic() < end:
            try:
                value = self.cond()
                if value:
                    self.at, self.value = time.monotonic(), value
                    return
                self._last = value
            except Exception as e:  # noqa: BLE001 - not yet (a process may be down)
                self._last = e
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:  # the test failed already: stop watching
            self._stop.set()
        self._thread.join()

    def wait(self) -> float:
        """When the state was first seen (a time.monotonic() value); AssertionError if it
        was not seen within the timeout."""
        self._thread.join()
        if self.at is None:
            raise AssertionError(f"{self.what}: not seen within {self.timeout}s "
                                 f"(last: {self._last!r})")
        return self.at
