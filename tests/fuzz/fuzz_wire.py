"""Differential fuzzing of the compiled wire parsers against their pure-Python twins.

    python -m tests.fuzz.fuzz_wire [libFuzzer flags, e.g. -max_total_time=20] [CORPUS...]

Every input goes to both implementations of each native parser of untrusted bytes; the
run fails on a crash in C (libFuzzer reports the signal) or on any difference in results
or errors. Coverage guidance comes from the pure twins, instrumented by atheris: their
branches are the C code's branches, by construction. Seeds are valid batch bodies, so
mutations start from messages that get deep into the walk.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris
import numpy as np

with atheris.instrument_imports(include=["ledgermq.wire", "ledgermq.broker.send_parsing",
                                         "ledgermq.remoting.command",
                                         "ledgermq.store.consume_queue"]):
    from ledgermq.wire import (  # noqa: F401
        batch, batch_body, hashes, hpack_block, huffman, native, scan, scan_batch)
    from ledgermq.grpcserver.headers import STATIC
    from ledgermq.wire.message import HEADER_SIZE
    from ledgermq.broker import send_parsing  # noqa: F401 (registers read_send's twins)
    from ledgermq.remoting import command  # noqa: F401 (registers binary_header_fields')
    from ledgermq.store import consume_queue  # noqa: F401 (registers walk_entries')

from ledgermq.client.producer import encode_batch_body  # noqa: E402


def outcome(fn, *args):
    try:
        result = fn(*args)
    except Exception as e:  # noqa: BLE001 - any error must match the twin's
        return "error", type(e).__name__, str(e)
    return "ok", plain(result)


def plain(x):
    """A result with buffers as bytes and arrays as lists, to compare."""
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def same(name: str, *args) -> None:
    pure, compiled = native.TWINS[name]
    expected, got = outcome(pure, *args), outcome(compiled, *args)
    if got != expected:
        raise AssertionError(f"{name} differs on {args!r}:\n native {got}\n pure   {expected}")


def structured(data: bytes) -> tuple[list, list, list]:
    """Messages whose bodies, properties and flags are fuzz bytes (a valid batch body)."""
    fdp = atheris.FuzzedDataProvider(data)
    cols: tuple[list, list, list] = ([], [], [])
    for _ in range(fdp.ConsumeIntInRange(1, 8)):
        cols[0].append(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40)))
        cols[1].append(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 80)))
        cols[2].append(fdp.ConsumeIntInRange(-2**31, 2**31 - 1))
    return cols


SEND_FIELDS = (["b", "c", "d", "e", "f", "g", "h", "j", "l", "m", "i"],
               ["topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                "bornTimestamp", "flag", "reconsumeTimes", "maxReconsumeTimes", "batch",
                "properties"])


def send_header(data: bytes) -> dict[str, str]:
    """A send request's header (V1 or V2 names) whose values are fuzz text."""
    fdp = atheris.FuzzedDataProvider(data)
    names = SEND_FIELDS[fdp.ConsumeIntInRange(0, 1)]
    return {name: fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 24))
            for name in names if fdp.ConsumeBool()}


def same_or_fallback(name: str, *args) -> None:
    """A compiled function that may leave an input to its twin (None): with its fallback
    the two agree, and where it answers alone it answers as the twin."""
    same(name, *args)
    try:
        direct = getattr(native._native, name)(*args)
    except Exception as e:  # noqa: BLE001 - then the twin must raise it too
        direct = ("error", type(e).__name__, str(e))
        if direct != outcome(native.TWINS[name][0], *args):
            raise AssertionError(f"{name} differs on {args!r}: native {direct}") from None
        return
    if direct is not None and ("ok", plain(direct)) != outcome(native.TWINS[name][0], *args):
        raise AssertionError(f"{name} differs on {args!r}: native {direct}")


def entry_walk(data: bytes) -> tuple:
    """walk_entries' arguments: the input as consume-queue entries, the numbers from its
    first bytes (small segments and budgets, so runs split and walks stop early)."""
    fdp = atheris.FuzzedDataProvider(data[:16])
    return (data, fdp.ConsumeIntInRange(-2, 1 << 40), fdp.ConsumeIntInRange(-1 << 20, 1 << 20),
            fdp.ConsumeIntInRange(-1, 1 << 16), fdp.ConsumeIntInRange(0, 3),
            fdp.ConsumeIntInRange(0, 1 << 10), fdp.ConsumeIntInRange(-1, 1 << 20))


def huffman_coded(data: bytes) -> bytes:
    """`data` as HPACK's Huffman code writes it (a header value as clients send it)."""
    import hpack.huffman
    import hpack.huffman_constants as codes
    return hpack.huffman.HuffmanEncoder(codes.REQUEST_CODES,
                                        codes.REQUEST_CODES_LENGTH).encode(data)


FILLED_TABLE = [(b"x-b", b"2"), (b"x-a", b"1"), (b"x-old", b"v")]  # (110 B)


def test_one_input(data: bytes) -> None:
    same_or_fallback("hpack_huffman", data)  # a header string as it came
    coded = huffman_coded(data)
    same_or_fallback("hpack_huffman", coded)
    if coded:  # one bit flipped where the input says
        same_or_fallback("hpack_huffman", coded[:-1] + bytes((coded[-1] ^ (1 << (data[0] % 8)),)))
    # a header block as it came, on an empty table and on one a client has filled
    same_or_fallback("hpack_block", data, STATIC, [], 0, 4096, 4096, 1 << 16)
    same_or_fallback("hpack_block", data, STATIC, FILLED_TABLE, 110, 110, 4096, 300)
    same_or_fallback("read_send", send_header(data))
    same_or_fallback("binary_header_fields", data)  # a remoting header as it came
    same_or_fallback("json_header_fields", data)
    same_or_fallback("frames_in", data, 1 << 20)  # a read as it came
    same_or_fallback("frames_in", len(data).to_bytes(4, "big") + data, 1 << 20)  # one frame
    same_or_fallback("walk_entries", *entry_walk(data))  # a queue file's bytes as found
    same("split_batch", data)  # as it came off the wire
    same("split_pulled", data)
    texts = [data.decode("utf-8", "replace"), data.decode("latin-1"),
             data[:len(data) & ~1].decode("utf-16-le", "surrogatepass")]
    same("java_string_hashes", texts)
    for text in texts:
        same("java_string_hash", text)
    bodies, props, flags = structured(data)
    same("split_batch", encode_batch_body(bodies, props, flags))  # deep in the properties
    same("encode_stored", bytes(HEADER_SIZE), b"\x01T", bodies, props, flags, 5, 1 << 20)
    same("encode_batch_body", bodies, props, flags)
    same("walk_positions", data, 0, len(data), 0, len(data))  # a replica push as it came
    stored = batch.encode_batch("T", 1, bodies, props, flag=flags)
    batch.fill_positions(stored, 0, len(bodies), 0, 0, 1)
    damaged = bytearray(stored.buf)
    if data:  # one byte changed where the input says: header, body, topic or properties
        damaged[int.from_bytes(data[:2], "big") % len(damaged)] ^= data[-1] or 1
    for raw in (bytes(stored.buf), bytes(damaged)):
        same("walk_positions", raw, 0, len(raw), 0, len(raw) + 8)
        same("scanned_columns", raw, np.array(stored.starts, np.int64).tobytes(), 1 << 40)
    same("scanned_columns", data, data[:8 * (len(data) // 8)][:64], 0)  # starts as it came
    cuts = sorted({b % (len(data) + 1) for b in data[:8]} | {0, len(data)})
    same("tags_and_keys", data, np.array(cuts[:-1], np.int64), np.array(cuts[1:], np.int64))


DICTIONARY = ["TAGS\\x01", "KEYS\\x01", "UNIQ_KEY\\x01", "\\x02", " ", "\\x01",
              "\\xda\\xa3\\x20\\xa7", "DELAY\\x01", "LMQ_DEDUP\\x011", "TIMER_", "REAL_",
              '\\"code\\":', '\\"extFields\\":{', '\\\\u0001', '\\\\ud83d', '\\":\\"',
              'null']  # (libFuzzer's dictionary syntax: quotes and backslashes escaped)


def seeds(into: Path) -> None:
    import hpack
    encoder = hpack.Encoder()  # a gRPC client's header blocks: literals, then indexed
    grpc_blocks = [encoder.encode([(b":path", b"/apache.rocketmq.v2.MessagingService/"
                                    b"SendMessage"), (b"te", b"trailers"),
                                   (b"x-mq-request-id", b"%d" % i)], huffman=i == 0)
                   for i in range(2)]
    examples = [*grpc_blocks,
        encode_batch_body([b"hello", b""], [b"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02",
                                            b""], [0, 3]),
        encode_batch_body([b"x" * 100] * 3, [b"UNIQ_KEY\x01ABCDEF\x02"] * 3, [0] * 3),
        encode_batch_body([b"\x00"], [b"TAGS\x01\xff\xfe\x02TAGS\x01b"], [-1]),
        b'{"code":310,"language":"CPP","version":399,"opaque":3,"flag":0,"remark":null,'
        b'"extFields":{"b":"T","i":"UNIQ_KEY\\u0001AB\\u0002"}}\n',
    ]
    for i, raw in enumerate(examples):
        (into / f"seed{i}").write_bytes(raw)


def mutate_from(corpus: Path, seconds: float, seed: int = 0) -> int:
    """Without libFuzzer: random byte flips, cuts and splices of the corpus's units, for
    `seconds` (the sanitized build's run, where atheris gets no coverage signal)."""
    import random
    import time
    rng = random.Random(seed)
    units = [f.read_bytes() for f in sorted(corpus.iterdir()) if f.is_file()] or [b""]
    deadline, runs = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        data = bytearray(rng.choice(units))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            at = rng.randint(0, len(data))
            if op == 0 and data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
            elif op == 1:
                del data[at:]
            elif op == 2:
                data[at:at] = rng.choice(units)[:rng.randint(0, 64)]
            else:
                data[at:at] = rng.randbytes(rng.randint(1, 8))
        test_one_input(bytes(data))
        runs += 1
    return runs


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--mutate":
        runs = mutate_from(Path(sys.argv[3]), float(sys.argv[2]))
        print(f"mutated {runs} inputs: native and pure agree")
        return
    if native._native is None:
        sys.exit("the compiled module is not built: nothing to fuzz")
    args = list(sys.argv)
    work = Path(tempfile.mkdtemp(prefix="ledgermq-fuzz-"))
    if not any(a.startswith("-dict=") for a in args):  # the property syntax's tokens
        (work / "dict").write_text("".join(f'"{t}"\n' for t in DICTIONARY))
        args.append(f"-dict={work / 'dict'}")
    dirs = [a for a in args[1:] if not a.startswith("-")]
    if not dirs:  # no corpus given: a fresh one
        dirs = [str(work / "corpus")]
        args.append(dirs[0])
    first = Path(dirs[0])
    if not first.is_file():  # a corpus directory (a file is an input to replay)
        first.mkdir(parents=True, exist_ok=True)
        if not any(first.iterdir()):
            seeds(first)
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
