"""The compiled wire functions and their pure-Python twins give byte-for-byte the same
results, and the same errors, on the same inputs (ledgermq/wire/native.py)."""
import os
import struct
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.client.producer import encode_batch_body
from ledgermq.store import consume_queue, index, reads, single  # noqa: F401 (their twins)
from ledgermq.wire import (  # noqa: F401
    batch, batch_body, hashes, huffman, ids, native, scan, scan_batch)
from ledgermq.wire.message import HEADER_SIZE

needs_native = pytest.mark.skipif(native._native is None,
                                  reason="the compiled module is not built")


def outcome(fn, *args):
    """What a call gives: its result with buffers as bytes, or its error's type and text."""
    try:
        return "ok", plain(fn(*args))
    except Exception as e:  # noqa: BLE001 - the point is to compare any error
        return "error", type(e), str(e)


def plain(x):
    if isinstance(x, (memoryview, bytearray)):
        return bytes(x)
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "tolist"):  # numpy arrays
        return x.tolist()
    return x


def both(name, *args):
    pure, compiled = native.TWINS[name]
    expected = outcome(pure, *args)
    assert outcome(compiled, *args) == expected
    return expected


# property pairs built to hit the edge cases: keys that prefix or suffix the real ones,
# values with separators, spaces, empty values, invalid UTF-8, the same key twice
keys = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"XTAGS", b"TAG", b"KEYSX", b"A", b""])
values = st.binary(max_size=12) | st.sampled_from([b"", b" ", b"a b", b" k  j ", b"\xff\xfe",
                                                   b"\xe2\x82", b"caf\xc3\xa9"])
props = st.lists(st.tuples(keys, values), max_size=4).map(
    lambda pairs: b"".join(k + b"\x01" + v + b"\x02" for k, v in pairs)) | st.binary(max_size=40)
messages = st.lists(st.tuples(st.binary(max_size=40), props, st.integers(-2**31, 2**31 - 1)),
                    min_size=1, max_size=6)


def damage(raw: bytes, how: tuple) -> bytes:
    kind, at, value = how
    if not raw or kind == "none":
        return raw
    at %= len(raw)
    if kind == "cut":
        return raw[:at]
    if kind == "set":
        return raw[:at] + bytes([value]) + raw[at + 1:]
    return raw + bytes([value]) * (at % 25)


damages = st.tuples(st.sampled_from(["none", "cut", "set", "grow"]), st.integers(0, 10_000),
                    st.integers(0, 255))


@needs_native
@settings(max_examples=150, deadline=None)
@given(messages, damages)
def test_split_batch_twins_agree(msgs, how):
    raw = damage(encode_batch_body([b for b, _, _ in msgs], [p for _, p, _ in msgs],
                                   [f for _, _, f in msgs]), how)
    result = both("split_batch", raw)
    if how[0] == "none":  # an undamaged body reads back as written
        assert result[0] == "ok" and result[1][0] == [b for b, _, _ in msgs]


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_split_batch_twins_agree_on_any_bytes(raw):
    both("split_batch", raw)


@needs_native
def test_split_batch_reads_tags_and_keys_like_property_value():
    raw = encode_batch_body(
        [b"TAGS\x01body", b"x", b"y"],
        [b"XTAGS\x01no\x02TAGS\x01t1\x02TAGS\x01t2\x02KEYS\x01 a  b\x02UNIQ_KEY\x01U\x02",
         b"TAGS\x01\x02UNIQ_KEY\x01\x02", b"KEYS\x01k\xff\x02"],
        [0, 1, 2])
    _, (_, _, flags, tags, keys) = both("split_batch", raw)
    assert flags == [0, 1, 2]
    assert tags == ["t1", "", None]  # the first TAGS pair counts; present but empty is ""
    assert keys == [["a", "b", "U"], [], ["k\ufffd"]]


stored_items = st.lists(st.tuples(st.binary(max_size=60), st.binary(max_size=30),
                                  st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)),
                        min_size=1, max_size=6)


@needs_native
@settings(max_examples=100, deadline=None)
@given(stored_items, st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE),
       st.binary(min_size=1, max_size=20), st.booleans(), st.booleans(), st.booleans(),
       st.integers(HEADER_SIZE, 300))
def test_encode_stored_twins_agree(items, template, topic, shared, per_flag, per_born, limit):
    bodies = [b for b, _, _, _ in items]
    props = items[0][1] if shared else [p for _, p, _, _ in items]
    flags = [f for _, _, f, _ in items] if per_flag else 7
    borns = [t for _, _, _, t in items] if per_born else 9
    topic_block = bytes([len(topic)]) + topic
    both("encode_stored", template, topic_block, bodies, props, flags, borns, limit)
    both("encode_stored", template, topic_block, bodies, props, flags, borns, 1 << 20)


@needs_native
def test_encode_stored_errors_agree():
    t = bytes(HEADER_SIZE)
    assert both("encode_stored", t, b"\x01T", [b"a", b"b"], [b""], 0, 0, 1000)[0] == "error"
    assert both("encode_stored", t, b"\x01T", [b"a" * 50], b"", 0, 0, 100)[2] == \
        "message 0 is 142 bytes, above maxMessageSize 100"


@needs_native
@settings(max_examples=100, deadline=None)
@given(messages)
def test_encode_batch_body_twins_agree(msgs):
    _, raw = both("encode_batch_body", [b for b, _, _ in msgs], [p for _, p, _ in msgs],
                  [f for _, _, f in msgs])
    assert both("split_batch", raw)[1][2] == [f for _, _, f in msgs]


@needs_native
@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=90), max_size=6), damages)
def test_split_pulled_twins_agree(chunks, how):
    """Messages of any length prefix (negative, zero, short of a header, too long) and cut
    tails."""
    raw = b"".join((len(c) + 4).to_bytes(4, "big", signed=True) + c for c in chunks)
    both("split_pulled", damage(raw, how))


@needs_native
def test_split_pulled_needs_the_fixed_header_of_each_message():
    """48 bytes (TOTALSIZE through BORNTIMESTAMP) are read from every message: 48 is
    enough, 47 is an error (the fuzzer caught the C version asking for 52)."""
    whole = (48).to_bytes(4, "big") + bytes(44)
    assert both("split_pulled", whole)[0] == "ok"
    assert both("split_pulled", (47).to_bytes(4, "big") + bytes(43))[2] == \
        "stored message at byte 0 is 47 bytes, shorter than its header"


@needs_native
@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=50), props), min_size=1, max_size=5),
       st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1))
def test_split_pulled_reads_stored_messages(msgs, born, store_ts):
    b = batch.encode_batch("T", 3, [m for m, _ in msgs], [p for _, p in msgs], flag=-7,
                           born_timestamp=[born] * len(msgs))
    batch.fill_positions(b, 0, len(msgs), 2**40, 2**33, store_ts)
    _, (views, heads) = both("split_pulled", bytes(b.buf) + b"\0\0\0")
    assert [h[3:6] for h in heads] == [[3, -7, 2**33 + i] for i in range(len(msgs))]
    assert [h[8] for h in heads] == [born] * len(msgs)


@needs_native
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=60), props), min_size=1, max_size=40), damages,
       st.integers(0, 400), st.integers(0, 300), st.sampled_from([0, 7, 2**40]))
def test_walk_positions_twins_agree(msgs, how, cut, room, base):
    """Stored messages (damaged, cut, grown), walked from anywhere to any limit, in a
    segment ending anywhere at or past the limit: the same stop, reason and starts."""
    b = batch.encode_batch("T", 1, [m for m, _ in msgs], [p for _, p in msgs])
    batch.fill_positions(b, 0, len(msgs), base, 5, 99)
    raw = damage(bytes(b.buf), how)
    limit = max(0, len(raw) - cut)
    view = memoryview(bytearray(raw + bytes(room)))  # zeros past the data: END
    for pos in (0, limit // 3):
        both("walk_positions", view, pos, limit, base, limit + room)
        both("walk_positions", view, pos, len(view), base, len(view))


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=30), props), min_size=1, max_size=6), damages,
       st.lists(st.integers(-3, 600), max_size=4), st.sampled_from([0, 7, 2**40, 2**63 - 1]))
def test_scanned_columns_twins_agree(msgs, how, extra, base):
    """The messages' own starts, damaged anywhere, and starts that are not any: the same
    columns, or None."""
    b = batch.encode_batch("T", 1, [m for m, _ in msgs], [p for _, p in msgs])
    batch.fill_positions(b, 0, len(msgs), 0, 5, 99)
    raw = damage(bytes(b.buf), how)
    starts = np.array(list(b.starts) + extra, np.int64)
    for positions in (starts[:len(msgs)], starts, starts[len(msgs):]):
        both("scanned_columns", memoryview(raw), positions.tobytes(), base)


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=6), props), min_size=1, max_size=8))
def test_tags_and_keys_twins_agree(regions):
    """Property regions with bytes between them (the rest of each stored message)."""
    raw, starts, ends = b"", [], []
    for gap, region in regions:
        raw += gap
        starts.append(len(raw))
        raw += region
        ends.append(len(raw))
    both("tags_and_keys", raw, np.array(starts, np.int64), np.array(ends, np.int64))


@needs_native
def test_a_property_key_cut_by_the_region_end_is_not_found():
    """A region ending in "TAGS" followed by "\x01b" in the next message's bytes has no
    tag (the fuzzer caught the vectorized twin reading the key across the region end: a
    next message of 16-32 MB starts with byte 0x01)."""
    raw = b"A\x01x\x02TAGS" + b"\x01b\x02"
    got = both("tags_and_keys", raw, np.array([0, 8], np.int64), np.array([8, 11], np.int64))
    assert got == ("ok", [[None, None], [[], []]])


@needs_native
def test_walk_positions_sees_a_blank_marker_and_a_wrong_crc():
    b = batch.encode_batch("T", 1, [b"x" * 10] * 40, [b""] * 40)
    batch.fill_positions(b, 0, 40, 0, 0, 1)
    blank = (8).to_bytes(4, "big") + (0xCBD43194).to_bytes(4, "big")
    good = bytes(b.buf) + blank
    _, (stop, reason, starts) = both("walk_positions", memoryview(good), 0, len(good), 0, len(good))
    assert (stop, reason, len(starts)) == (len(b.buf), "blank", 40)
    bad = bytearray(good)
    bad[starts[20] + HEADER_SIZE] ^= 1  # a body byte of a middle message
    assert both("walk_positions", memoryview(bad), 0, len(bad), 0, len(bad))[1][1:] == \
        ["unusual", []]


@needs_native
@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40) | st.text(alphabet="ab#", min_size=250, max_size=300) |
                st.sampled_from(["", "\U0001F600x", "\ud800", "a\udfff", "\xe9t\xe9", "\u4e2d"]),
                max_size=8))
def test_java_string_hashes_twins_agree(strings):
    both("java_string_hashes", strings)
    for s in strings:  # the one-key version (the index's single-message path)
        both("java_string_hash", s)


def test_java_string_hashes_match_java():
    """Values Java's String.hashCode gives (UTF-16 units; the emoji is a surrogate pair)."""
    pure, compiled = native.TWINS["java_string_hashes"]
    expected = [0, 96354, -1656969516, 646394, 1772899]
    words = ["", "abc", "TopicTest#KEY1", "\u4e2d\u6587", "\U0001F600"]
    for fn in filter(None, (pure, compiled)):
        assert fn(words).tolist() == expected
    for fn in filter(None, native.TWINS["java_string_hash"]):
        assert list(map(fn, words)) == expected


@needs_native
@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="0123456789ABCDEF", max_size=20) | st.just("\xe9"),
       st.integers(-2**63, 2**63 - 1), st.integers(0, 2**40), st.integers(-1, 70))
def test_unique_ids_twins_agree(prefix, elapsed, first, n):
    both("unique_ids", prefix, elapsed, first, n)


def test_unique_ids_layout():
    """prefix, elapsed ms (31 bits) and the counter (15 bits), upper-case hex."""
    for fn in filter(None, native.TWINS["unique_ids"]):
        assert fn("AB", 0x80000001, 0x7FFF, 2) == ["AB000000017FFF", "AB000000010000"]


@needs_native
@settings(max_examples=100, deadline=None)
@given(st.integers(1, 7), st.integers(0, 5), st.binary(min_size=28, max_size=28),
       st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(0, 2**62),
                          st.integers(0, 2**31 - 1)), max_size=12), st.integers(0, 4))
def test_index_put_twins_agree(slots, first, heads, entries, spare):
    """Entries chained into their hash slots: the same bytes from both, hash collisions,
    negative hashes and buffers too small included."""
    heads_at, entries_at = 3, 3 + 4 * slots
    size = entries_at + (first + len(entries)) * 20 + spare - 2
    cols = [np.array([e[i] for e in entries], np.int64) for i in range(3)]
    outs = []
    for fn in native.TWINS["index_put"]:
        mm = bytearray(size)
        mm[heads_at:heads_at + 4 * slots] = heads[:4 * slots]
        outs.append((outcome(fn, mm, heads_at, slots, entries_at, first, *cols), bytes(mm)))
    assert outs[0] == outs[1]
    if spare >= 2:
        assert outs[0][0][0] == "ok"


@needs_native
@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=8), st.data(),
       st.integers(0, 2**62), st.integers(0, 2**62), st.integers(-2**63, 2**63 - 1))
def test_fill_positions_twins_agree(bodies, data, phys, qoff, ts):
    lo = data.draw(st.integers(0, len(bodies)))
    hi = data.draw(st.integers(lo, len(bodies)))
    outs = []
    for fn in native.TWINS["fill_positions"]:
        b = batch.encode_batch("T", 1, bodies, b"", born_timestamp=[5] * len(bodies))
        if len(bodies) == 1:  # a batch of one carries tuples (the single-send path)
            b = batch.encode_batch("T", 1, bodies, b"")
        outs.append((outcome(fn, b, lo, hi, phys, qoff, ts), bytes(b.buf)))
    assert outs[0] == outs[1]


@needs_native
@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=8, max_size=20), st.lists(st.integers(-2**63, 2**63 - 1), max_size=8))
def test_offset_msg_ids_twins_agree(host, offsets):
    both("offset_msg_ids", host, np.array(offsets, np.int64))


def test_offset_msg_ids_are_host_then_offset():
    from ledgermq.wire.message import offset_msg_id
    host = b"\x7f\x00\x00\x01\x00\x00\x27\x11"
    for fn in filter(None, native.TWINS["offset_msg_ids"]):
        assert fn(host, np.array([0, 2**40 + 255], np.int64)) == \
            [offset_msg_id(host, 0), offset_msg_id(host, 2**40 + 255)] == \
            ["7F0000010000271100000000" + "00000000", "7F00000100002711" + "00000100000000FF"]


def test_the_module_is_built_where_a_compiler_is():
    """Where the machine has a C compiler, `pip install` builds the module, and it is
    the one in use unless LEDGERMQ_PURE=1 asks for the twins."""
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        pytest.skip("no C compiler on this machine")
    assert native._native is not None, "ledgermq.wire._native did not build: see pip's log"
    code = "from ledgermq.wire import native, batch_body; print(native.active(), " \
           "batch_body.split_batch is native.TWINS['split_batch'][0])"
    for env, expected in (("0", "native False"), ("1", "pure (LEDGERMQ_PURE=1) True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "LEDGERMQ_PURE": env}, check=True).stdout
        assert out.strip() == expected


SEG = 4096
# commit-log offsets that meet: back to back, across a segment start, below the log's
# start, negative, at the ends of int64 (the queue file is read as found)
entry_phys = st.integers(0, 3 * SEG) | st.sampled_from(
    [0, SEG - 100, SEG, SEG + 1, -1, -(1 << 63), (1 << 63) - 1, (1 << 63) - 50])
entry_sizes = st.sampled_from([0, 1, 100, 50, SEG, -1, -(1 << 31), (1 << 31) - 1]) | \
    st.integers(0, 300)


@needs_native
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(entry_phys, entry_sizes, st.integers(-2**63, 2**63 - 1)),
                max_size=40),
       st.booleans(), st.integers(0, 2**62) | st.just(2**64), st.integers(-10, SEG),
       st.sampled_from([SEG, 1, 0, -5]), st.integers(0, 3), st.integers(0, 600),
       st.integers(-1, 4000) | st.just(2**63 - 1), st.integers(0, 19))
def test_walk_entries_twins_agree(ents, chained, first, log_min, seg_size, count, total,
                                  max_bytes, ragged):
    """Consume-queue entries as a hostile or damaged file may hold them, walked with any
    budget: the same runs, queue offsets, counts and errors; the compiled one answering
    by itself wherever every number fits 64 bits."""
    if chained:  # messages back to back, as a busy queue holds them
        at, chain = ents[0][0] if ents else 0, []
        for _, size, tag in ents:
            chain.append((at, size, tag))
            at += max(size, 0)
        ents = [(p, s, t) for p, s, t in chain if -(1 << 63) <= p < 1 << 63]
    raw = b"".join(struct.pack(">qiq", p, s, t) for p, s, t in ents) + bytes(ragged)
    args = (raw, first, log_min, seg_size, count, total, max_bytes)
    expected = both("walk_entries", *args)
    if expected[0] == "ok" and first + len(ents) < 1 << 63 and all(
            p + s < 1 << 63 for p, s, _ in ents) and max(0, total) + sum(
            max(s, 0) for _, s, _ in ents) < 1 << 63:
        assert native._native.walk_entries(*args) is not None


def test_walk_entries_joins_neighbours_within_a_segment_only():
    """What a pull is answered from: back-to-back messages in one stretch, a new stretch
    where a segment starts, entries below the log's start skipped, the byte budget kept."""
    ents = [(SEG - 200, 100, 0), (SEG - 100, 100, 0), (SEG, 50, 0), (SEG + 50, 50, 0),
            (10, 10, 0)]
    raw = b"".join(struct.pack(">qiq", *e) for e in ents)
    for fn in filter(None, native.TWINS["walk_entries"]):
        assert fn(raw, 7, 0, SEG, 0, 0, 1 << 20) == (
            [SEG - 200, SEG, SEG, SEG + 100, 10, 20], [7, 8, 9, 10, 11], 5, 5, 310)
        assert fn(raw, 7, 100, SEG, 0, 0, 1 << 20)[1] == [7, 8, 9, 10]  # 10 is below 100
        assert fn(raw, 7, 0, SEG, 0, 0, 250) == ([SEG - 200, SEG, SEG, SEG + 50], [7, 8, 9],
                                                 3, 3, 250)
        assert fn(raw, 7, 0, SEG, 0, 0, 20) == ([SEG - 200, SEG - 100], [7], 1, 1, 100)


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 64), st.sampled_from([0, 4096, 1 << 40]),
       st.lists(st.integers(-20, 90) | st.sampled_from([2**63 - 1, -2**63, 2**70]),
                max_size=12))
def test_run_views_twins_agree(size, base, rel):
    """Runs inside, across and outside the view, reversed, odd in number, past 64 bits:
    the same slices (compared as bytes), the compiled one answering by itself where every
    offset fits."""
    view = memoryview(bytes(range(size)))
    runs = [base + r if abs(r) < 1000 else r for r in rel]
    expected = both("run_views", view, base, runs)
    if len(runs) % 2 == 0 and all(-2**62 < r < 2**62 for r in runs):
        assert native._native.run_views(view, base, runs) is not None
    if expected[0] == "ok" and len(runs) == 2 and 0 <= rel[0] <= rel[1] <= size:
        assert expected[1] == [bytes(range(rel[0], rel[1]))]


# text of every kind: ASCII, Latin-1, BMP, astral, and lone surrogates
any_text = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=6)


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 7), st.integers(0, 5), st.binary(min_size=28, max_size=28),
       any_text, any_text, st.integers(-2**63, 2**63 - 1), st.integers(0, 2**31 - 1),
       st.integers(0, 3))
def test_index_put_key_twins_agree(slots, num, heads, topic, key, phys, diff, spare):
    """One key's entry, hashed from "topic#key" and chained into its slot: the same bytes
    from both (non-ASCII, astral and lone-surrogate text, collisions, a buffer too small
    included); a lone surrogate fails both the same way."""
    heads_at, entries_at = 3, 3 + 4 * slots
    size = entries_at + (num + 1) * 20 + spare - 1
    outs = []
    for fn in native.TWINS["index_put_key"]:
        mm = bytearray(size)
        mm[heads_at:heads_at + 4 * slots] = heads[:4 * slots]
        got = outcome(fn, mm, heads_at, slots, entries_at, num, topic, key, phys, diff)
        outs.append((got[:2], bytes(mm)))  # (an encoder's error text names its input)
    assert outs[0] == outs[1]


def test_index_put_key_hashes_topic_hash_key():
    """The entry's hash is RocketMQ's: abs(Java hashCode of "topic#key")."""
    for fn in filter(None, native.TWINS["index_put_key"]):
        mm = bytearray(3 + 4 + 20)
        fn(mm, 3, 1, 7, 0, "TopicA", "key-é", 42, 5)
        assert struct.unpack_from(">iqii", mm, 7) == (index.java_hash("TopicA#key-é"), 42, 5, 0)


# an int field's values: within its width, past it (the twin's struct error), bools
wide_ints = st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-2**70, 2**70), st.booleans())
hosts = st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=10))


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=6), st.binary(max_size=40), st.binary(max_size=40), wide_ints,
       wide_ints, wide_ints, st.one_of(st.integers(-2**63, 2**63 - 1), wide_ints), hosts,
       hosts, wide_ints, st.integers(0, 250), st.booleans())
def test_stored_message_twins_agree(block, body, props, queue_id, flag, sys_flag, born,
                                    born_host, store_host, reconsumed, most, long_props):
    """One stored message (the single-send path): the compiled one answers as the twin
    (struct's packing) or leaves the call to it (None), never otherwise: numbers past
    their field's width, bools, hosts of other lengths, long properties, messages above
    the limit included."""
    pure, compiled = native.TWINS["stored_message"]
    props = props * 900 if long_props else props  # (past 32767 bytes, with 37 or more)
    args = (block, body, props, queue_id, flag, sys_flag, born, born_host, store_host,
            reconsumed, most + (40_000 if long_props else 0))
    expected = outcome(pure, *args)
    assert outcome(compiled, *args) == expected
    direct = native._native.stored_message(*args)
    assert direct is None or ("ok", direct) == expected


@needs_native
def test_stored_message_of_a_usual_send_is_compiled():
    """What a producer's send gives it is answered in C, not handed to the twin."""
    args = (b"\x05Topic", b"x" * 100, b"UNIQ_KEY\x01A\x02", 3, 0, 0, 1_700_000_000_000,
            b"\x7f\x00\x00\x01\x00\x00\x2a\x9f", b"\x7f\x00\x00\x01\x00\x00\x27\x11", 0,
            4 << 20)
    direct = native._native.stored_message(*args)
    assert direct is not None and direct == native.TWINS["stored_message"][0](*args)


@needs_native
def test_first_of_asks_the_twin_only_where_the_compiled_one_answers_none():
    """twin_or_fallback's callable: the compiled answer, else the twin's, with the same
    arguments (keywords too); the compiled one's errors are not the twin's to mask."""
    calls = []

    def compiled(*args, **kw):
        calls.append(("compiled", args, kw))
        if args and args[0] == "boom":
            raise MessageFormatErrorForTest("bad")
        return None if args and args[0] == "odd" else ("compiled", args, kw)

    def pure(*args, **kw):
        calls.append(("pure", args, kw))
        return ("pure", args, kw)

    f = native._native.first_of(compiled, pure)
    assert f("usual", 2, k=3) == ("compiled", ("usual", 2), {"k": 3})
    assert f("odd", k=1) == ("pure", ("odd",), {"k": 1})
    with pytest.raises(MessageFormatErrorForTest):
        f("boom")
    assert [c[0] for c in calls] == ["compiled", "compiled", "pure", "compiled"]
    with pytest.raises(TypeError):
        native._native.first_of(compiled, 5)


class MessageFormatErrorForTest(ValueError):
    pass


# an int argument: within int64, past it, a bool, or not an int at all
any_int = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-2**70, 2**70), st.booleans(),
                    st.just(1.0), st.none())


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 400), st.integers(-4, 300), st.binary(min_size=80, max_size=120),
       any_int, any_int, any_int, st.integers(0, 60), st.integers(-2, 50), any_int,
       st.booleans())
def test_put_single_twins_agree(log_size, log_pos, msg, qoff, phys, ts, cq_size, cq_pos, tag,
                                wide_pos):
    """One message into the log with its positions and store time, and its queue entry:
    the same bytes from both, the same error type (a message shorter than the fixed
    header, a write past either buffer, an int that is none or past int64), nothing
    written on an error."""
    if wide_pos:
        log_pos += 2**64
    outs = []
    for fn in native.TWINS["put_single"]:
        log, cq = bytearray(b"\xee" * log_size), bytearray(b"\xdd" * cq_size)
        got = outcome(fn, log, log_pos, msg, qoff, phys, ts, cq, cq_pos, tag)
        outs.append((got[:2], bytes(log), bytes(cq)))
        if got[0] == "error":
            assert log == b"\xee" * log_size and cq == b"\xdd" * cq_size
    assert outs[0] == outs[1]


@needs_native
@pytest.mark.parametrize("which", ["log", "msg", "cq"])
@pytest.mark.parametrize("kind", [bytes, lambda b: memoryview(bytes(b)), lambda b: None, str])
def test_put_single_twins_agree_on_buffers(which, kind):
    """A read-only log or queue, or something that is not a buffer where one goes: the
    same error type from both, nothing written."""
    outs = []
    for fn in native.TWINS["put_single"]:
        args = {"log": bytearray(200), "msg": bytes(100), "cq": bytearray(40)}
        args[which] = kind(args[which]) if kind is not str else "x" * 100
        got = outcome(fn, args["log"], 0, args["msg"], 1, 2, 3, args["cq"], 0, 4)
        outs.append(got[:2])
    assert outs[0] == outs[1]


def test_put_single_writes_positions_and_entry():
    """Where the fields go: QUEUEOFFSET at 20, PHYSICALOFFSET at 28, STORETIMESTAMP at 56,
    the rest of the message as given; the entry is (phys, size, tag)."""
    msg = bytes(range(100))
    for fn in filter(None, native.TWINS["put_single"]):
        log, cq = bytearray(130), bytearray(25)
        fn(log, 7, msg, 5, 2**40, 1_700_000_000_123, cq, 3, -9)
        assert struct.unpack_from(">qq", log, 27) == (5, 2**40)
        assert struct.unpack_from(">q", log, 63) == (1_700_000_000_123,)
        assert log[7:27] == msg[:20] and log[43:63] == msg[36:56] and log[71:107] == msg[64:]
        assert struct.unpack_from(">qiq", cq, 3) == (2**40, 100, -9)


@needs_native
@given(st.binary(max_size=80))
def test_hpack_huffman_twins_agree_on_coded_strings(text):
    import hpack.huffman
    import hpack.huffman_constants as codes
    coded = hpack.huffman.HuffmanEncoder(codes.REQUEST_CODES,
                                         codes.REQUEST_CODES_LENGTH).encode(text)
    pure, compiled = native.TWINS["hpack_huffman"]
    assert pure(coded) == compiled(coded) == text


@needs_native
@given(st.binary(max_size=40))
def test_hpack_huffman_twins_agree_on_any_bytes(raw):
    pure, compiled = native.TWINS["hpack_huffman"]
    assert outcome(compiled, raw) == outcome(pure, raw)


def hpack_blocks(fields_per_block, huffman: bool, table_size: int | None) -> list[bytes]:
    """Blocks as a gRPC client's encoder makes them, one after another on its table."""
    import hpack
    encoder = hpack.Encoder()
    if table_size is not None:
        encoder.header_table_size = table_size
    return [encoder.encode(fields, huffman=huffman) for fields in fields_per_block]


hpack_fields = st.lists(st.lists(st.tuples(
    st.sampled_from([b":path", b"content-type", b"x-mq-client-id", b"grpc-timeout"]) |
    st.binary(min_size=1, max_size=8).map(bytes.lower), st.binary(max_size=50)),
    max_size=8), min_size=1, max_size=5)


def hpack_walk(blocks, max_list=1 << 16, table_size=4096):
    """Each twin's answers block after block, each carrying its own table on."""
    from ledgermq.grpcserver.headers import STATIC
    answers = []
    for name in (0, 1):
        fn, state, seen = native.TWINS["hpack_block"][name], ([], 0, table_size), []
        for block in blocks:
            got = outcome(fn, block, STATIC, state[0], state[1], state[2], table_size, max_list)
            seen.append(got)
            if got[0] != "ok":
                break
            state = tuple(got[1][1:])
        answers.append(seen)
    return answers


@needs_native
@settings(max_examples=150, deadline=None)
@given(hpack_fields, st.booleans(), st.none() | st.integers(0, 4096), damages,
       st.sampled_from([200, 1 << 16]))
def test_hpack_block_twins_agree(fields, huffman, table_size, how, max_list):
    from ledgermq.wire import hpack_block  # noqa: F401 (registers the twins)
    blocks = hpack_blocks(fields, huffman, table_size)
    blocks[-1] = damage(blocks[-1], how)
    pure, compiled = hpack_walk(blocks, max_list)
    assert compiled == pure


@needs_native
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=4))
def test_hpack_block_twins_agree_on_any_bytes(blocks):
    from ledgermq.wire import hpack_block  # noqa: F401
    pure, compiled = hpack_walk(blocks)
    assert compiled == pure


@needs_native
def test_hpack_block_leaves_the_callers_table_as_it_was():
    from ledgermq.grpcserver.headers import STATIC
    from ledgermq.wire import hpack_block  # noqa: F401
    block = hpack_blocks([[(b"x-a", b"1"), (b"x-b", b"2")]], False, None)[0]
    for fn in native.TWINS["hpack_block"]:
        table = [(b"x-old", b"v")]
        fields, after, size, _ = fn(block, STATIC, table, 38, 4096, 4096, 1 << 16)
        assert fields == [(b"x-a", b"1"), (b"x-b", b"2")]
        assert after == [(b"x-b", b"2"), (b"x-a", b"1"), (b"x-old", b"v")] and size == 38 + 2 * 36
        assert table == [(b"x-old", b"v")]
