"""Pulled messages to Arrow record batches in the source's schema."""
from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from ..client.message import MessageExt
from ..wire.scan_batch import property_per_message

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


def repeated_string(value: str, n: int) -> pa.Array:
    """A string column of `n` copies of `value`, built from buffers (no Python list)."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data * n)])


def raw_to_record_batch(topic: str, broker: str, queue_id: int, raw: bytes, end: int,
                        include_properties: bool, queue) -> pa.RecordBatch | None:
    """A pulled body (stored messages back to back) to a record batch of the messages
    whose queue offset is below `end`, decoded with numpy (see decode.py); None when
    nothing is left."""
    from ..client.message import decode_pulled
    from .decode import fixed_columns, property_array
    cols = fixed_columns(raw)
    if cols is None:  # an unusual layout: decode message by message
        msgs = [m for m in decode_pulled(raw, queue) if m.queue_offset < end]
        return to_record_batch(topic, broker, queue_id, msgs, include_properties) if msgs \
            else None
    keep = int(np.searchsorted(cols["queue_offset"], end)) if cols["n"] else 0
    if keep == 0:
        return None
    n = cols["n"]
    ts = pa.timestamp("us", tz="UTC")
    uniq = property_array(cols, b"UNIQ_KEY")
    if uniq.null_count:  # no client id: the offset message id, as RocketMQ shows it
        from ..wire.message import offset_msg_id
        ids = uniq.to_pylist()
        for i, u in enumerate(ids):
            if u is None:
                host = bytes(cols["buf"][cols["starts"][i] + 64:cols["starts"][i] + 72])
                ids[i] = offset_msg_id(host, int(cols["phys"][i]))
        uniq = pa.array(ids, pa.string())
    if include_properties:
        from ..wire.message import decode_properties
        props = [list(decode_properties(raw[a:b]).items()) for a, b in
                 zip(cols["props_at"].tolist(), cols["props_end"].tolist())]
        props = pa.array(props, pa.map_(pa.string(), pa.string()))
    else:
        props = pa.nulls(n, pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_arrays([
        repeated_string(topic, n), repeated_string(broker, n),
        pa.array(np.full(n, queue_id, np.int32)), pa.array(cols["queue_offset"]),
        uniq, property_array(cols, b"KEYS"), property_array(cols, b"TAGS"), cols["body"],
        pa.array(cols["born_ts"] * 1000).cast(ts), pa.array(cols["store_ts"] * 1000).cast(ts),
        props,
    ], schema=ARROW_SCHEMA)
    return batch if keep == n else batch.slice(0, keep)
