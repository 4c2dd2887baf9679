"""Per-message cost of each compiled wire function beside its pure-Python twin, on a
batch of 100 messages of 100 bytes (JSON rows; one process, no I/O).

    python bench/native_micro.py
"""
from __future__ import annotations

import json
import os
import sys
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledgermq.store import index  # noqa: E402,F401 (registers its twin)
from ledgermq.wire import batch, batch_body, hashes, ids, native, scan, scan_batch  # noqa: E402,F401

N = 100


def cases():
    bodies = [os.urandom(100) for _ in range(N)]
    uniq = [b"UNIQ_KEY\x01%032X\x02WAIT\x01true\x02" % i for i in range(N)]
    body = batch_body.encode_batch_body(bodies, uniq, [0] * N)
    stored = batch.encode_batch("Topic", 0, bodies, uniq, index_keys=[[str(i)] for i in range(N)])
    batch.fill_positions(stored, 0, N, 0, 0, 1)
    keys = [f"Topic#{i:032X}" for i in range(N)]
    mm = bytearray(40 + 4 * 5000 + 20 * (N + 1))
    cols = [np.arange(N, dtype=np.int64) * 7919, np.arange(N, dtype=np.int64) * 150,
            np.zeros(N, np.int64)]
    yield "split_batch (broker: a SEND_BATCH body)", "split_batch", (body,)
    yield "encode_stored (broker: stored layout)", "encode_stored", (
        bytes(88), b"\x05Topic", bodies, uniq, 0, 0, 1 << 22)
    yield "fill_positions (broker: offsets, timestamp)", "fill_positions", (
        stored, 0, N, 1000, 5, 1)
    yield "java_string_hashes (broker: index keys)", "java_string_hashes", (keys,)
    yield "index_put (broker: index entries)", "index_put", (mm, 40, 5000, 40 + 4 * 5000, 1,
                                                              *cols)
    yield "encode_batch_body (client: batch body)", "encode_batch_body", (
        bodies, uniq, [0] * N)
    yield "unique_ids (client: message ids)", "unique_ids", ("7F0000010000ABCDEF01", 5, 0, N)
    yield "offset_msg_ids (broker: send response ids)", "offset_msg_ids", (
        b"\x7f\x00\x00\x01\x00\x00\x27\x11", cols[1])
    yield "split_pulled (client: pull response)", "split_pulled", (bytes(stored.buf),)
    raw = bytes(stored.buf)
    yield "walk_positions (replica: a pushed range, CRCs checked)", "walk_positions", (
        raw, 0, len(raw), 0, len(raw) + 8)
    at = np.frombuffer(raw, np.uint8)
    starts = np.flatnonzero(at == ord("U"))  # each message's properties (UNIQ_KEY first)
    starts = starts[np.isin(starts, [raw.find(b"UNIQ_KEY", s) for s in starts])][:N]
    yield "tags_and_keys (replica: TAGS and index keys)", "tags_and_keys", (
        raw, starts, starts + len(uniq[0]))


def main() -> None:
    for label, name, args in cases():
        pure, compiled = native.TWINS[name]
        row = {"bench": "native_micro", "function": label, "messages": N}
        for impl, fn in (("pure", pure), ("native", compiled)):
            if fn is None:
                continue
            runs, secs = timeit.Timer(lambda: fn(*args)).autorange()
            best = min(timeit.repeat(lambda: fn(*args), number=runs, repeat=5)) / runs
            row[f"{impl}_us_per_msg"] = round(best * 1e6 / N, 3)
        if compiled is not None:
            row["speedup"] = round(row["pure_us_per_msg"] / row["native_us_per_msg"], 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
