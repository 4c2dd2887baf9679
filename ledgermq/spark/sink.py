"""Writing rows to topics from a Spark task: deterministic keys, broker-side dedup."""
from __future__ import annotations

import asyncio
from typing import Iterator

from ..client import Message, MQClientError, Producer, SendStatus
from .options import WriteOptions

DEDUP = {"LMQ_DEDUP": "1"}


def _as_bytes(v) -> bytes:
    if v is None:
        raise ValueError("a ledgermq sink row has a null body")
    return v.encode() if isinstance(v, str) else bytes(v)


def rows_to_messages(opts: WriteOptions, batch, key_prefix: str, first: int):
    """(topic, queue_id or None, Message) per row of an Arrow record batch."""
    cols = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    n = batch.num_rows
    none = [None] * n
    topics = cols.get("topic", none)
    for i in range(n):
        props = dict(cols["properties"][i] or ()) if "properties" in cols else {}
        props.update(DEDUP)
        props["UNIQ_KEY"] = f"{key_prefix}-{first + i}"
        topic = opts.topic or topics[i]
        if not topic:
            raise ValueError(f"row {first + i} has no topic")
        msg = Message(topic, _as_bytes(cols["body"][i]), tags=cols.get("tags", none)[i],
                      keys=cols.get("keys", none)[i], properties=props)
        qid = cols.get("queue_id", none)[i]
        yield topic, qid, msg


async def _send_all(opts: WriteOptions, batches: Iterator, key_prefix: str) -> int:
    sent = 0
    async with Producer(opts.producer_group, opts.namesrv, retry_times=5,
                        send_timeout=10) as p:
        groups: dict[tuple, list[Message]] = {}

        async def flush(key) -> None:
            msgs = groups.pop(key)
            topic, qid = key
            queue = None
            if qid is not None:
                queue = next((q for q in await p.queues(topic) if q.queue_id == qid), None)
                if queue is None:
                    raise ValueError(f"topic {topic} has no queue {qid}")
            r = await p.send_batch(msgs, queue)
            if r.status is not SendStatus.SEND_OK:
                raise MQClientError(0, f"batch to {topic} answered {r.status.value}")

        for batch in batches:
            for topic, qid, msg in rows_to_messages(opts, batch, key_prefix, sent):
                key = (topic, qid)
                groups.setdefault(key, []).append(msg)
                sent += 1
                if len(groups[key]) >= opts.batch_size:
                    await flush(key)
        for key in list(groups):
            await flush(key)
    return sent


def write_batches(opts: WriteOptions, batches: Iterator, job: str, ctx) -> int:
    """Send every row of a task's partition; returns how many rows."""
    prefix = f"{job}-{ctx.partitionId() if ctx else 0}"
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_send_all(opts, batches, prefix))
    finally:
        loop.close()
