"""Writing rows to topics from a Spark task: deterministic keys, broker-side dedup.

Each row becomes a message whose properties string is built directly (no Message
objects): UNIQ_KEY = <job>-<partition>-<row index>, LMQ_DEDUP=1 (the broker drops a
message whose UNIQ_KEY it stores already), TAGS / KEYS and user properties when given.

Deduplication is per broker group: groups do not share their key indexes. So each batch
goes to a group chosen from its first row's key (the same on every retry and re-run),
and a batch that group does not take is retried there, never sent to another group,
where a first attempt that was stored after all would not be seen.
"""
from __future__ import annotations

import asyncio
import zlib
from typing import Iterator

from ..client import MQClientError, Producer, SendStatus
from ..client.message import MessageQueue, properties_string
from ..remoting import RemotingError, ResponseCode
from .options import WriteOptions

SEP, PAIR = "\x01", "\x02"
IN_FLIGHT = 4  # batches a task keeps in flight
SEND_ATTEMPTS = 5  # to the batch's own group, a growing pause apart
RETRY_PAUSE_S = 0.5
_RETRY = {ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE,
          ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST}


def place(queues: list[MessageQueue], key: str) -> MessageQueue:
    """The queue of the batch whose first row has UNIQ_KEY `key`: its group (broker name)
    and a queue in it, both from the key's hash."""
    brokers = sorted({q.broker_name for q in queues})
    h = zlib.crc32(key.encode())
    mine = [q for q in queues if q.broker_name == brokers[h % len(brokers)]]
    return mine[(h // len(brokers)) % len(mine)]


async def send_pinned(p: Producer, topic: str, queue: MessageQueue, bodies, props,
                      uniqs):
    """One batch to `queue`, retried there (its master may change, its group may not)."""
    last: Exception | None = None
    for attempt in range(SEND_ATTEMPTS):
        if attempt:
            await asyncio.sleep(RETRY_PAUSE_S * attempt)
        try:
            return await p.send_encoded_batch(topic, bodies, props, [0] * len(bodies),
                                              uniqs, queue)
        except RemotingError as e:
            last = e
        except MQClientError as e:
            if e.code not in _RETRY:
                raise
            last = e
        try:
            await p.instance.route(topic, refresh=True)
        except (RemotingError, MQClientError):
            pass
    raise MQClientError(ResponseCode.SYSTEM_ERROR, (
        f"{len(bodies)} rows for {topic} queue {queue.broker_name}:{queue.queue_id} not sent "
        f"in {SEND_ATTEMPTS} attempts ({last}); not sent to another group either, whose "
        "deduplication could not see an earlier attempt: the task fails, and its retry "
        "sends the same rows to the same group"))


def _as_bytes(v) -> bytes:
    if v is None:
        raise ValueError("a ledgermq sink row has a null body")
    return v.encode() if isinstance(v, str) else bytes(v)


def encode_rows(opts: WriteOptions, batch, key_prefix: str, first: int):
    """Per row of an Arrow record batch: (topic, queue_id or None, body, properties bytes,
    uniq key)."""
    cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    n = batch.num_rows
    none = [None] * n
    topics, tags, keys = cols.get("topic", none), cols.get("tags", none), cols.get("keys", none)
    extra, qids = cols.get("properties", none), cols.get("queue_id", none)
    bodies = cols["body"]
    for i in range(n):
        uniq = f"{key_prefix}-{first + i}"
        own = f"TAGS{SEP}{tags[i]}{PAIR}" if tags[i] else ""
        if keys[i]:
            own += f"KEYS{SEP}{keys[i]}{PAIR}"
        if extra[i]:
            own += properties_string(dict(extra[i]))
        topic = opts.topic or topics[i]
        if not topic:
            raise ValueError(f"row {first + i} has no topic")
        props = f"{own}UNIQ_KEY{SEP}{uniq}{PAIR}LMQ_DEDUP{SEP}1{PAIR}WAIT{SEP}true{PAIR}"
        yield topic, qids[i], _as_bytes(bodies[i]), props.encode(), uniq


async def _send_all(opts: WriteOptions, batches: Iterator, key_prefix: str) -> int:
    sent = 0
    async with Producer(opts.producer_group, opts.namesrv, retry_times=5,
                        send_timeout=10) as p:
        groups: dict[tuple, tuple[list, list, list]] = {}
        in_flight: list[asyncio.Future] = []

        async def flush(key) -> None:
            bodies, props, uniqs = groups.pop(key)
            topic, qid = key
            queues = await p.queues(topic)
            if qid is not None:
                queue = next((q for q in queues if q.queue_id == qid), None)
                if queue is None:
                    raise ValueError(f"topic {topic} has no queue {qid}")
            else:
                queue = place(queues, uniqs[0])
            in_flight.append(asyncio.ensure_future(send_pinned(
                p, topic, queue, bodies, props, uniqs)))
            if len(in_flight) >= IN_FLIGHT:
                await _check(in_flight.pop(0), topic)

        async def _check(fut, topic) -> None:
            r = await fut
            if r.status is not SendStatus.SEND_OK:
                raise MQClientError(0, f"batch to {topic} answered {r.status.value}")

        for batch in batches:
            for topic, qid, body, props, uniq in encode_rows(opts, batch, key_prefix, sent):
                g = groups.get((topic, qid))
                if g is None:
                    g = groups[(topic, qid)] = ([], [], [])
                g[0].append(body)
                g[1].append(props)
                g[2].append(uniq)
                sent += 1
                if len(g[0]) >= opts.batch_size:
                    await flush((topic, qid))
        for key in list(groups):
            await flush(key)
        for fut in in_flight:
            await _check(fut, opts.topic or "the topic")
    return sent


def write_batches(opts: WriteOptions, batches: Iterator, job: str, ctx) -> int:
    """Send every row of a task's partition; returns how many rows."""
    prefix = f"{job}-{ctx.partitionId() if ctx else 0}"
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_send_all(opts, batches, prefix))
    finally:
        loop.close()
