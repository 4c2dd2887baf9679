"""Pulled messages to Arrow record batches in the source's schema."""
from __future__ import annotations

import pyarrow as pa

from ..client.message import MessageExt

SCHEMA_DDL = ("topic string, broker string, queue_id int, queue_offset long, msg_id string, "
              "keys string, tags string, body binary, born_timestamp timestamp, "
              "store_timestamp timestamp, properties map<string,string>")

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("broker", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("msg_id", pa.string()), ("keys", pa.string()),
    ("tags", pa.string()), ("body", pa.binary()),
    ("born_timestamp", pa.timestamp("us", tz="UTC")),
    ("store_timestamp", pa.timestamp("us", tz="UTC")),
    ("properties", pa.map_(pa.string(), pa.string())),
])


def to_record_batch(topic: str, broker: str, queue_id: int, msgs: list[MessageExt],
                    include_properties: bool) -> pa.RecordBatch:
    n = len(msgs)
    props = [m.properties for m in msgs]
    cols = [
        pa.array([topic] * n, pa.string()),
        pa.array([broker] * n, pa.string()),
        pa.array([queue_id] * n, pa.int32()),
        pa.array([m.queue_offset for m in msgs], pa.int64()),
        pa.array([p.get("UNIQ_KEY") or m.offset_msg_id for p, m in zip(props, msgs)],
                 pa.string()),
        pa.array([p.get("KEYS") for p in props], pa.string()),
        pa.array([p.get("TAGS") for p in props], pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([m.born_timestamp * 1000 for m in msgs], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")),
        pa.array([m.store_timestamp * 1000 for m in msgs], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")),
        pa.array([list(p.items()) for p in props] if include_properties else [None] * n,
                 pa.map_(pa.string(), pa.string())),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)
