"""Load under faults, shared by the replication tests: send continuously, deliver signals
to processes meanwhile, read everything back, and check nothing acknowledged was lost."""
import asyncio
import os
import time

from ledgermq import Message, MQClientError, Producer, PullConsumer, PullStatus
from ledgermq.remoting import RemotingError

from ..wait import until


async def send_for(namesrv, seconds, acked, prefix, statuses=None):
    """Send one message at a time for `seconds`; record every SEND_OK as (queue, body) and
    count every status (or error) in `statuses`."""
    async with Producer("p-" + prefix, namesrv, retry_times=3, send_timeout=3) as p:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            body = f"{prefix}-{i}".encode()
            try:
                r = await p.send(Message("Replicated", body))
                status = r.status.value
                if status == "SEND_OK":
                    acked.append((r.queue.queue_id, body))
            except (MQClientError, RemotingError) as e:
                status = type(e).__name__
                await asyncio.sleep(0.1)  # pacing: no burst of failing sends (not a wait)
            if statuses is not None:
                statuses[status] = statuses.get(status, 0) + 1
            i += 1


async def read_all(namesrv, settle_s=10.0, topic="Replicated"):
    """{queue_id: [bodies in queue order]} of every queue of `topic`. A broker that just
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
            out[q.queue_id] = got
        return out


def check_nothing_lost(acked, stored):
    for qid in {q for q, _ in acked}:
        mine = [b for q, b in acked if q == qid]
        have = stored.get(qid, [])
        missing = [b for b in mine if b not in set(have)]
        assert not missing, f"queue {qid}: {len(missing)} acknowledged messages lost"
        positions = [have.index(b) for b in mine]
        assert positions == sorted(positions), f"queue {qid}: order changed"


def under_load(ns, seconds, prefix, fault_at, *signals, statuses=None) -> list:
    """Send for `seconds`; at `fault_at` deliver `signals` (pid, signal, pause after) to
    processes. Returns what was acknowledged as (queue id, body)."""
    acked: list = []

    async def scenario():
        sender = asyncio.create_task(send_for(ns, seconds, acked, prefix, statuses))
        await asyncio.sleep(fault_at)  # the fault schedule, not a wait
        for pid, sig, pause in signals:
            os.kill(pid, sig)
            await asyncio.sleep(pause)
        await sender
    asyncio.run(scenario())
    return acked
