"""Pulled messages to Arrow record batches in the source's schema."""
from __future__ import annotations

import itertools

import pyarrow as pa

from ..client.message import MessageExt
from ..store.scan_batch import property_per_message

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


def _property_columns(msgs: list[MessageExt]) -> tuple[list, list, list]:
    """UNIQ_KEY, KEYS and TAGS of every message, found with one regex pass per key over
    the joined property regions (not a dict per message)."""
    regions = [bytes(m.raw[m._where()[5]:]) for m in msgs]
    ends = list(itertools.accumulate(len(r) for r in regions))
    starts = [0] + ends[:-1]
    raw = b"".join(regions)
    n = len(msgs)
    out = []
    for key in (b"UNIQ_KEY", b"KEYS", b"TAGS"):
        found = property_per_message(raw, starts, ends, key)
        out.append([found.get(i) for i in range(n)])
    return out[0], out[1], out[2]


def to_record_batch(topic: str, broker: str, queue_id: int, msgs: list[MessageExt],
                    include_properties: bool) -> pa.RecordBatch:
    n = len(msgs)
    uniq, keys, tags = _property_columns(msgs)
    ts = pa.timestamp("us", tz="UTC")
    cols = [
        pa.array([topic] * n, pa.string()),
        pa.array([broker] * n, pa.string()),
        pa.array([queue_id] * n, pa.int32()),
        pa.array([m.queue_offset for m in msgs], pa.int64()),
        pa.array([u or m.offset_msg_id for u, m in zip(uniq, msgs)], pa.string()),
        pa.array(keys, pa.string()),
        pa.array(tags, pa.string()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([m.born_timestamp * 1000 for m in msgs], pa.int64()).cast(ts),
        pa.array([m.store_timestamp * 1000 for m in msgs], pa.int64()).cast(ts),
        pa.array([list(m.properties.items()) for m in msgs] if include_properties
                 else [None] * n, pa.map_(pa.string(), pa.string())),
    ]
    return pa.RecordBatch.from_arrays(cols, schema=ARROW_SCHEMA)
