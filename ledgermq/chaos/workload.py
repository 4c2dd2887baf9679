"""The chaos workload, from the root side: producers sending unique keyed messages at a
fixed rate (ledgermq's client and, given a Python that has it, RocketMQ's C++ client:
`cpp_producer.py`), a push consumer group and a pull reader reading throughout,
and after the last heal a drain that reads every queue to its end with a fresh reader.
Every attempt, completion and read goes to the history.

A send is one request (no client retries, the queue chosen here in turns), so its outcome
says what became of that one message: SEND_OK = ok; a refusal the broker answers before
writing (not the master, no permission, busy, no topic) = fail; anything else (timeout,
lost connection, FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE, a PENDING the control node could not
settle, SYSTEM_ERROR) = info: it may or may not be in the log. The C++ client retries
inside a send, so its failures are all info."""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..client.admin import Admin
from ..client.instance import MQClientError
from ..client.message import Message, MessageExt, MessageQueue, SendStatus
from ..client.producer import Producer
from ..client.pull import PullConsumer, PullStatus
from ..client.push import ConsumeStatus, PushConsumer
from ..remoting import RemotingError, ResponseCode
from ..wire.message import PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from .history import HistoryWriter

log = logging.getLogger(__name__)

# answered before anything was written: the message is definitely not in the log
REFUSALS = {ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.NO_PERMISSION,
            ResponseCode.SYSTEM_BUSY, ResponseCode.TOPIC_NOT_EXIST,
            ResponseCode.MESSAGE_ILLEGAL}
TOPIC = "ChaosTopic"
PUSH_GROUP, PULL_GROUP, DRAIN_GROUP = "chaos-push", "chaos-pull", "chaos-drain"


@dataclass
class Settings:
    namesrv: str
    rate: float = 50.0  # sends per second, over all producers
    producers: int = 2
    send_timeout: float = 3.0
    max_in_flight: int = 400  # per producer: a stalled broker cannot pile up sends forever
    queues: int = 4  # per broker group
    cpp_python: str | None = None  # a Python with PyPI rocketmq==0.4.4: a C++ producer too
    cpp_share: float = 0.25  # of `rate`, when it runs


async def create_topic(namesrv: str, queues: int, deadline_s: float = 60) -> list[str]:
    """The workload's topic on every group's master (retried while masters come up)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            async with Admin(namesrv) as a:
                return await a.update_topic(TOPIC, cluster="DefaultCluster",
                                            read_queues=queues, write_queues=queues)
        except (MQClientError, RemotingError, OSError) as e:
            if time.monotonic() > end:
                raise RuntimeError(f"could not create {TOPIC}: {e}") from None
            await asyncio.sleep(0.5)


def cpp_error_outcome(error: str) -> str:
    """A failed C++ client send's outcome: "fail" where the client raises before any
    request leaves it (it found no route for the topic), else "info" (it may be stored)."""
    return "fail" if error.startswith("ProducerSendSyncFailed: No route info") else "info"


def _id(m: MessageExt) -> str | None:
    """A workload message's id: its key (the C++ client sets its own UNIQ_KEY)."""
    return m.properties.get(PROPERTY_KEYS) or None


class Workload:
    """Runs until `stop()`; then `drain()` reads everything with a fresh reader."""

    def __init__(self, s: Settings, history: HistoryWriter):
        self.s, self.h = s, history
        self._stop = asyncio.Event()
        self.sent = 0
        self._children: list[asyncio.subprocess.Process] = []  # the C++ producer, while up

    def stop(self) -> None:
        self._stop.set()

    async def kill_children(self) -> None:
        """SIGKILL what the workload started and has not reaped (a run ended early)."""
        for proc in self._children:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    async def run(self, ready: asyncio.Event | None = None) -> None:
        push = PushConsumer(PUSH_GROUP, self.s.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            rebalance_interval=5, pull_suspend_ms=2000)
        push.subscribe(TOPIC)
        push.register_listener(self._on_push)
        await push.start()
        producers = [await Producer(f"chaos-producer-{k}", self.s.namesrv,
                                    send_timeout=self.s.send_timeout, retry_times=0,
                                    resolve_timeout=self.s.send_timeout * 4).start()
                     for k in range(self.s.producers)]
        if ready is not None:
            ready.set()
        try:
            await asyncio.gather(*(self._produce(k, p) for k, p in enumerate(producers)),
                                 self._pull_reader(),
                                 *([self._cpp_produce()] if self.s.cpp_python else []))
        finally:
            for p in producers:
                await p.shutdown()
            await push.shutdown()

    # -- sending ------------------------------------------------------------------------
    def _own_rate(self) -> float:
        return self.s.rate * (1 - self.s.cpp_share) if self.s.cpp_python else self.s.rate

    async def _produce(self, k: int, p: Producer) -> None:
        period = self.s.producers / self._own_rate()
        turn = itertools.count()
        in_flight: set[asyncio.Task] = set()
        nxt = time.monotonic()
        for i in itertools.count():
            if self._stop.is_set():
                break
            if len(in_flight) < self.s.max_in_flight:
                t = asyncio.ensure_future(self._send(p, f"p{k}-{i:07d}", next(turn)))
                in_flight.add(t)
                t.add_done_callback(in_flight.discard)
            nxt += period
            try:  # the fixed rate's clock: the next send is due at `nxt`
                await asyncio.wait_for(self._stop.wait(), max(0.0, nxt - time.monotonic()))
            except TimeoutError:
                pass
        if in_flight:
            await asyncio.wait(in_flight)

    async def _send(self, p: Producer, mid: str, turn: int) -> None:
        msg = Message(TOPIC, mid.encode(), keys=mid, properties={PROPERTY_UNIQ_KEY: mid})
        self.h.invoke(mid, topic=TOPIC, key=mid)
        self.sent += 1
        try:
            r = await p.send(msg, selector=lambda qs, m, a: qs[a % len(qs)], arg=turn)
        except MQClientError as e:
            outcome = "fail" if e.code in REFUSALS else "info"
            self.h.complete(mid, outcome, error=f"{e.code}: {e}"[:200])
            return
        except (RemotingError, OSError, asyncio.TimeoutError) as e:
            self.h.complete(mid, "info", error=f"{type(e).__name__}: {e}"[:200])
            return
        except Exception as e:  # noqa: BLE001 - anything else: unknown fate, keep running
            log.warning("send %s: %r", mid, e)
            self.h.complete(mid, "info", error=f"{type(e).__name__}: {e}"[:200])
            return
        outcome = "ok" if r.status is SendStatus.SEND_OK else "info"
        self.h.complete(mid, outcome, status=r.status.value, broker=r.queue.broker_name,
                        queue=r.queue.queue_id, offset=r.queue_offset)

    async def _cpp_produce(self) -> None:
        """RocketMQ's C++ client in its own process; its event lines go to the history."""
        script = Path(__file__).with_name("cpp_producer.py")
        with tempfile.TemporaryDirectory(prefix="chaos-cpp-") as home:  # its logs go there
            proc = await asyncio.create_subprocess_exec(
                self.s.cpp_python, str(script), self.s.namesrv, TOPIC,
                str(self.s.rate * self.s.cpp_share), "cpp", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, env={**os.environ, "HOME": home})
            self._children.append(proc)
            lines = asyncio.ensure_future(self._cpp_events(proc.stdout))
            await self._stop.wait()
            proc.stdin.close()  # it finishes the sends in flight and exits
            try:
                await asyncio.wait_for(proc.wait(), self.s.send_timeout * 4)
            except TimeoutError:
                log.warning("the C++ producer did not stop; killed")
                proc.kill()
                await proc.wait()
            await lines

    async def _cpp_events(self, out: asyncio.StreamReader) -> None:
        while line := await out.readline():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the client library's own chatter
            if "i" in rec:
                self.h.invoke(rec["i"], topic=TOPIC, key=rec["i"])
                self.sent += 1
            elif "c" in rec:  # SendStatus 0: SEND_OK
                self.h.complete(rec["c"], "ok" if rec["status"] == 0 else "info",
                                status=f"cpp:{rec['status']}", offset=rec["offset"])
            elif "e" in rec:
                self.h.complete(rec["e"], cpp_error_outcome(rec["error"]), error=rec["error"])

    # -- reading ------------------------------------------------------------------------
    def _on_push(self, msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            mid = _id(m)
            if mid is not None and m.topic == TOPIC:
                self.h.read(mid, topic=TOPIC, reader="push", broker=m.queue.broker_name,
                            queue=m.queue_id, offset=m.queue_offset)
        return ConsumeStatus.CONSUME_SUCCESS

    async def _pull_reader(self) -> None:
        async with PullConsumer(PULL_GROUP, self.s.namesrv) as c:
            offsets: dict[MessageQueue, int] = {}
            while not self._stop.is_set():
                try:
                    for mq in await c.fetch_queues(TOPIC):
                        offsets.setdefault(mq, 0)
                except (MQClientError, RemotingError, OSError):
                    pass
                got = 0
                for mq in list(offsets):
                    got += await self._pull_once(c, mq, offsets, "pull", timeout=2.0)
                if not got:
                    try:  # nothing new anywhere: look again shortly, or stop
                        await asyncio.wait_for(self._stop.wait(), 0.3)
                    except TimeoutError:
                        pass

    async def _pull_once(self, c: PullConsumer, mq: MessageQueue, offsets: dict, reader: str,
                         timeout: float) -> int:
        """One pull of `mq` from its offset; records what it read; how many it read (-1: the
        queue is at its end, -2: the pull failed)."""
        try:
            r = await c.pull(mq, offsets[mq], 64, timeout=timeout)
        except (MQClientError, RemotingError, OSError, asyncio.TimeoutError):
            return -2
        if r.status is PullStatus.OFFSET_ILLEGAL:
            offsets[mq] = max(r.min_offset, min(offsets[mq], r.max_offset))
            return 0
        if r.status is not PullStatus.FOUND:
            return -1
        for m in r.messages:
            mid = _id(m)
            if mid is not None:
                self.h.read(mid, topic=TOPIC, reader=reader, broker=mq.broker_name,
                            queue=mq.queue_id, offset=m.queue_offset)
        offsets[mq] = r.next_begin_offset
        return len(r.messages)

    async def drain(self, deadline_s: float = 120) -> bool:
        """Read every queue from its first message to its end with a fresh reader; True when
        every queue was read to its end, every queue that acknowledged a send among them (a
        group whose route is missing keeps it False until the deadline). The drain's end
        record says which queues it read to which offset, for the checker."""
        end = time.monotonic() + deadline_s
        self.h.drain_start()
        done: set[MessageQueue] = set()
        async with PullConsumer(DRAIN_GROUP, self.s.namesrv) as c:
            offsets: dict[MessageQueue, int] = {}
            while time.monotonic() < end:
                try:
                    for mq in await c.fetch_queues(TOPIC):
                        offsets.setdefault(mq, 0)
                except (MQClientError, RemotingError, OSError):
                    await asyncio.sleep(0.5)
                    continue
                for mq in offsets:
                    while mq not in done and time.monotonic() < end:
                        n = await self._pull_once(c, mq, offsets, "drain", timeout=5.0)
                        if n == -1:
                            done.add(mq)
                        elif n == -2:
                            await asyncio.sleep(0.5)
                            break
                reached = {(mq.broker_name, mq.queue_id) for mq in done}
                if offsets and len(done) == len(offsets) and self._acked_queues() <= reached:
                    self.h.drain_end(queues=[(mq.broker_name, mq.queue_id, offsets[mq])
                                             for mq in done])
                    return True
                await asyncio.sleep(0.5)  # a route still missing a group: ask again
        return False

    def _acked_queues(self) -> set[tuple[str, int]]:
        """Every (group, queue) that acknowledged a send (where the answer said)."""
        return {(a.broker, a.queue) for a in list(self.h.history.attempts.values())
                if a.outcome == "ok" and a.broker is not None and a.queue is not None}
