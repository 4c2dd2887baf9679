"""MessageStore behaviour a broker relies on: appends, reads, lookups, flush, retention."""
import os
import threading
import time

import pytest

from ledgermq.store import GetStatus, Message, MessageStore, PutStatus, decode_message
from ledgermq.wire.message import (
    BLANK_MAGIC_CODE, MessageFormatError, encode_properties, tag_hash,
)

from .conftest import small_config


def put(store, topic, qid, bodies, tags=None, props=b""):
    r = store.put(store.encode(topic, qid, bodies, props, tags))
    assert r.status is PutStatus.PUT_OK, r.error
    return r


def read_all(store, topic, qid, offset=0, **kw):
    out = []
    while True:
        g = store.get_messages(topic, qid, offset, max_count=100, **kw)
        if g.status is not GetStatus.FOUND and g.status is not GetStatus.NO_MATCHED_MESSAGE:
            return out
        out += [decode_message(m) for m in g.messages()]
        offset = g.next_begin_offset


def test_batch_lands_in_order_across_segments(make_store):
    store = make_store()
    bodies = [b"m%05d" % i + b"." * 150 for i in range(2000)]  # ~480 KB over 64 KB segments
    for i in range(0, 2000, 250):
        put(store, "T", 0, bodies[i:i + 250])
    msgs = read_all(store, "T", 0)
    assert [m.body for m in msgs] == bodies
    assert [m.queue_offset for m in msgs] == list(range(2000))
    assert len(store.commitlog.files.files) > 5
    # every segment but the last ends with the blank marker, and no message crosses one
    for m in msgs:
        assert m.phys_offset // (64 * 1024) == (m.phys_offset + m.total_size - 1) // (64 * 1024)
    for seg in store.commitlog.files.files[:-1]:
        data = bytes(seg.mm)
        pos = 0
        while True:
            size, magic = int.from_bytes(data[pos:pos + 4], "big"), \
                int.from_bytes(data[pos + 4:pos + 8], "big", signed=True)
            if magic == BLANK_MAGIC_CODE:
                assert pos + size == len(data)
                break
            pos += size


def test_queues_and_offsets_are_independent(make_store):
    store = make_store()
    put(store, "A", 0, [b"a0", b"a1"])
    put(store, "A", 1, [b"b0"])
    put(store, "B", 0, [b"c0"])
    put(store, "A", 0, [b"a2"])
    assert [m.body for m in read_all(store, "A", 0)] == [b"a0", b"a1", b"a2"]
    assert [m.queue_offset for m in read_all(store, "A", 0)] == [0, 1, 2]
    assert store.max_offset_in_queue("A", 1) == 1
    assert store.topics() == ["A", "B"] and store.queue_ids("A") == [0, 1]


def test_get_statuses(make_store):
    store = make_store()
    assert store.get_messages("T", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    put(store, "T", 0, [b"x"] * 5)
    assert store.get_messages("T", 0, 5).status is GetStatus.OFFSET_OVERFLOW_ONE
    g = store.get_messages("T", 0, 9)
    assert g.status is GetStatus.OFFSET_OVERFLOW_BADLY and g.next_begin_offset == 0
    g = store.get_messages("T", 0, 2, max_count=2)
    assert g.status is GetStatus.FOUND and g.message_count == 2 and g.next_begin_offset == 4
    assert list(g.queue_offsets) == [2, 3]


def test_max_bytes_limits_a_pull_but_never_starves(make_store):
    store = make_store()
    put(store, "T", 0, [b"x" * 1000] * 10)
    g = store.get_messages("T", 0, 0, max_count=10, max_bytes=2500)
    assert g.message_count == 2 and g.next_begin_offset == 2
    g = store.get_messages("T", 0, 0, max_count=10, max_bytes=10)
    assert g.message_count == 1  # one message always fits


def test_contiguous_messages_come_back_as_one_view(make_store):
    store = make_store()
    put(store, "T", 0, [b"x" * 10] * 50)
    g = store.get_messages("T", 0, 0, max_count=50)
    assert len(g.buffers) == 1 and len(g.messages()) == 50


def test_tag_filter(make_store):
    from ledgermq.wire.message import tag_hash
    store = make_store()
    tags = ["a", "b", "c"] * 10
    props = [encode_properties({"TAGS": t}) for t in tags]
    put(store, "T", 0, [t.encode() for t in tags], tags, props)
    got = read_all(store, "T", 0, tag_codes=[tag_hash("b")])
    assert [m.body for m in got] == [b"b"] * 10
    g = store.get_messages("T", 0, 0, max_count=1, tag_codes=[tag_hash("zzz")])
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 30


@pytest.mark.usefixtures("wire_impl")  # index entries from the compiled and the pure twin
def test_every_key_of_a_batch_is_found(make_store):
    """A batch's keys go into the index in one call (index_put): each key finds its own
    message, and a key every message shares finds them all, newest first."""
    store = make_store()
    n = 300
    bodies = [b"%d" % i for i in range(n)]
    r = store.append(store.encode("T", 0, bodies, [b"KEYS\x01k%d all\x02" % i for i in range(n)],
                                  index_keys=[[f"k{i}", "all"] for i in range(n)]))
    assert r.ok
    assert [m.body for m in store.query_by_key("T", "k7")] == [b"7"]
    assert [m.body for m in store.query_by_key("T", "k299")] == [b"299"]
    assert sorted(m.body for m in store.query_by_key("T", "all", max_num=1000)) == sorted(bodies)


def test_lookups_by_key_id_and_time(make_store):
    store = make_store()
    r1 = store.put_message(Message("T", b"one", properties={"KEYS": "k1 shared", "UNIQ_KEY": "U1"}))
    time.sleep(0.02)  # store timestamps that differ from t_mid (not a wait)
    t_mid = int(time.time() * 1000)
    time.sleep(0.02)
    r2 = store.put_message(Message("T", b"two", properties={"KEYS": "k2 shared"}))
    assert [m.body for m in store.query_by_key("T", "shared")] == [b"one", b"two"]
    assert [m.body for m in store.query_by_key("T", "k2")] == [b"two"]
    assert [m.body for m in store.query_by_key("T", "U1")] == [b"one"]
    assert store.query_by_key("Other", "k1") == []
    mid = r2.msg_ids(store.store_host)[0]
    assert store.view_message_by_id(mid).body == b"two"
    assert store.offset_by_time("T", 0, 0) == 0
    assert store.offset_by_time("T", 0, t_mid) == 1
    assert store.offset_by_time("T", 0, t_mid + 10**6) == 2
    assert r1.queue_offset == 0 and r2.queue_offset == 1


def test_reopen_keeps_everything(tmp_path):
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as s:
        for i in range(20):
            put(s, "T", i % 3, [b"%d-%d" % (i, j) for j in range(100)])
        s.put_message(Message("T", b"keyed", queue_id=1, properties={"KEYS": "kk"}))
    with MessageStore(cfg) as s:
        assert not s.recovery.crashed and s.recovery.messages_scanned == 0
        assert [s.max_offset_in_queue("T", q) for q in range(3)] == [700, 701, 600]
        assert read_all(s, "T", 2)[-1].body == b"17-99"
        assert s.query_by_key("T", "kk")[0].body == b"keyed"
        r = put(s, "T", 0, [b"after"])
        assert r.queue_offset == 700


def test_consume_queues_rebuild_from_the_commit_log(tmp_path):
    import shutil
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as s:
        for i in range(10):
            put(s, "T", i % 2, [b"%d-%d" % (i, j) for j in range(300)])
        expected = {q: [m.body for m in read_all(s, "T", q)] for q in (0, 1)}
    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / "checkpoint").unlink()
    with MessageStore(cfg) as s:
        assert {q: [m.body for m in read_all(s, "T", q)] for q in (0, 1)} == expected


def test_dispatch_bound_hides_messages_until_passed(make_store):
    store = make_store()
    store.dispatch_follows_log = False
    r1 = put(store, "T", 0, [b"a", b"b"])
    r2 = put(store, "T", 0, [b"c"])
    assert store.max_offset_in_queue("T", 0) == 0
    store.set_dispatch_bound(int(r1.phys_offsets[0] + 10))  # inside the first message
    assert store.max_offset_in_queue("T", 0) == 0
    store.set_dispatch_bound(int(r1.phys_offsets[0] + 100))  # past only the first message
    assert [m.body for m in read_all(store, "T", 0)] == [b"a"]
    store.set_dispatch_bound(r2.end_offset)
    assert [m.body for m in read_all(store, "T", 0)] == [b"a", b"b", b"c"]


def test_append_raw_replicates_byte_for_byte(tmp_path):
    primary = MessageStore(small_config(tmp_path / "p"))
    replica = MessageStore(small_config(tmp_path / "r"))
    primary.open(); replica.open()
    try:
        for i in range(30):
            put(primary, "T", i % 4, [b"%d-%d" % (i, j) * 10 for j in range(60)])
        end = primary.commitlog.max_offset
        # ship in irregular chunks that follow message boundaries, as replication does
        pos = 0
        msgs = primary.commitlog.scan(0, end)
        bounds = [m.phys for m in msgs][::37] + [end]
        for b in bounds[1:]:
            while pos < b:
                seg = primary.commitlog.files.find(pos)
                stop = min(b, seg.end)
                replica.append_raw(pos, primary.commitlog.read(pos, stop - pos)
                                   if stop <= primary.commitlog.max_offset else b"")
                pos = replica.commitlog.max_offset
        assert replica.commitlog.max_offset == end
        for q in range(4):
            assert [m.body for m in read_all(replica, "T", q)] == \
                [m.body for m in read_all(primary, "T", q)]
        # the replica continues the queue offsets
        assert put(replica, "T", 0, [b"next"]).queue_offset == primary.max_offset_in_queue("T", 0)
    finally:
        primary.close(); replica.close()


def test_append_raw_refuses_bad_data_and_writes_nothing(make_store):
    from ledgermq.store import StoreError
    src = make_store()
    put(src, "T", 0, [b"hello", b"world"])
    good = bytes(src.commitlog.read(0, src.commitlog.max_offset))
    dst = make_store(storePathRootDir=str(src.root.parent / "dst"))
    with pytest.raises(StoreError, match="log ends at 0"):
        dst.append_raw(5, good)
    bad = bytearray(good)
    bad[-3] ^= 0x55  # damages the second message's properties/topic area
    with pytest.raises(StoreError):
        dst.append_raw(0, bytes(bad[:len(good) - 10]))  # cut mid-message
    assert dst.commitlog.max_offset == 0
    dst.append_raw(0, good)
    assert [m.body for m in read_all(dst, "T", 0)] == [b"hello", b"world"]


def test_truncate_cuts_log_and_queues(make_store):
    store = make_store()
    put(store, "T", 0, [b"a"] * 10)
    keep = store.commitlog.max_offset
    put(store, "T", 0, [b"b"] * 10)
    put(store, "U", 0, [b"c"] * 5)
    store.truncate(keep)
    assert store.commitlog.max_offset == keep
    assert store.max_offset_in_queue("T", 0) == 10 and store.max_offset_in_queue("U", 0) == 0
    assert put(store, "T", 0, [b"new"]).queue_offset == 10
    assert [m.body for m in read_all(store, "T", 0)][-2:] == [b"a", b"new"]


def test_oversize_message_and_bad_topic_are_refused(make_store):
    store = make_store(maxMessageSize=1024)
    r = store.put_message(Message("T", b"x" * 2000))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "maxMessageSize" in r.error
    r = store.put_message(Message("bad topic!", b"x"))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "topic" in r.error
    # a message larger than a segment is refused, the log is untouched
    big = make_store(storePathRootDir=str(store.root.parent / "big"), maxMessageSize=1 << 20)
    r = big.put_message(Message("T", b"x" * 70_000))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and big.commitlog.max_offset == 0
    assert put(big, "T", 0, [b"ok"]).queue_offset == 0


def test_max_message_size_bounds_the_body_as_rocketmqs(make_store):
    """maxMessageSize is the body's limit; header, topic and properties come on top (RocketMQ's
    encoder leaves them 64 KiB), alone and in a batch."""
    store = make_store(maxMessageSize=4096)
    props = encode_properties({"k": "v" * 8000})
    r = store.put_message(Message("T", b"x" * 4096, properties={"k": "v" * 8000}))
    assert r.status is PutStatus.PUT_OK, r.error
    r = store.put_message(Message("T", b"x" * 4097))
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "body is 4097 bytes" in r.error
    batch = store.encode("T", 0, [b"a", b"x" * 4096, b"b"], props)
    assert store.append(batch).status is PutStatus.PUT_OK
    with pytest.raises(MessageFormatError, match="message 1's body is 4097 bytes"):
        store.encode("T", 0, [b"a", b"x" * 4097], props)


def test_disk_full_refuses_writes_with_a_clear_status(make_store):
    store = make_store()
    put(store, "T", 0, [b"before"])
    store.config.diskMaxUsedSpaceRatio = 0.001  # any real disk is fuller than this
    store._update_disk_usage()
    r = store.put_message(Message("T", b"refused"))
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and "disk full" in r.error
    assert [m.body for m in read_all(store, "T", 0)] == [b"before"]  # reads still work
    store.config.diskMaxUsedSpaceRatio = 100
    store._update_disk_usage()
    assert put(store, "T", 0, [b"after"]).queue_offset == 1


def test_segment_creation_failure_is_a_status_not_a_crash(make_store, monkeypatch):
    from ledgermq.store import mapped_file
    store = make_store()
    put(store, "T", 0, [b"x" * 100] * 10)

    def no_space(fd, off, size):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(mapped_file.os, "posix_fallocate", no_space)
    before = store.commitlog.max_offset
    r = store.put(store.encode("T", 0, [b"y" * 1000] * 100))  # needs new segments
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and "no space" in r.error
    assert store.commitlog.max_offset == before  # nothing half-written
    assert store.max_offset_in_queue("T", 0) == 10
    monkeypatch.undo()
    store.disk_full = False
    assert put(store, "T", 0, [b"z"]).queue_offset == 10


def test_retention_deletes_old_segments_and_their_queue_entries(make_store):
    store = make_store(fileReservedTime=1)  # hours
    for i in range(40):
        put(store, "T", 0, [b"%04d" % i + b"." * 1000] * 10)
    store.commitlog.flush()
    store._flush_dispatch_and_checkpoint()
    files = store.commitlog.files.files
    assert len(files) > 4
    old = time.time() - 2 * 3600
    for f in files[:3]:
        os.utime(f.path, (old, old))
    assert store.delete_expired() == 3
    assert store.commitlog.min_offset == files[0].start
    g = store.get_messages("T", 0, 0)
    assert g.status is GetStatus.OFFSET_TOO_SMALL
    lo = store.min_offset_in_queue("T", 0)
    first = decode_message(store.get_messages("T", 0, lo).messages()[0])
    assert first.phys_offset >= store.commitlog.min_offset and first.queue_offset == lo
    assert store.delete_expired() == 0  # the rest is young


def test_sync_flush_group_commit_serves_many_writers_per_fsync(make_store, monkeypatch):
    store = make_store(flushDiskType="SYNC_FLUSH")
    syncs = []
    real = store.commitlog.files.sync_range

    def counting(lo, hi):
        syncs.append(hi)
        time.sleep(0.002)  # a disk that takes a moment, so writers pile up
        real(lo, hi)
    monkeypatch.setattr(store.commitlog.files, "sync_range", counting)
    results = []

    def writer(i):
        for j in range(20):
            results.append(store.put(store.encode("T", i % 4, [b"%d-%d" % (i, j)])))
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status is PutStatus.PUT_OK for r in results) and len(results) == 320
    assert store.commitlog.flushed_offset >= max(r.end_offset for r in results)
    assert len(syncs) < 320 / 2  # group commit: far fewer fsyncs than writes


def test_sync_flush_timeout(make_store, monkeypatch):
    store = make_store(flushDiskType="SYNC_FLUSH", syncFlushTimeout=100)
    stuck = threading.Event()

    def stuck_disk(lo, hi):
        stuck.wait(5)
    monkeypatch.setattr(store.commitlog.files, "sync_range", stuck_disk)
    r = store.put(store.encode("T", 0, [b"x"]))
    assert r.status is PutStatus.FLUSH_DISK_TIMEOUT and "syncFlushTimeout" in r.error
    stuck.set()


def test_put_async_group_commit_and_timeout(make_store, monkeypatch):
    import asyncio
    store = make_store(flushDiskType="SYNC_FLUSH", syncFlushTimeout=200)

    async def main():
        rs = await asyncio.gather(*(store.put_async(store.encode("T", 0, [b"%d" % i]))
                                    for i in range(50)))
        assert all(r.ok for r in rs)
        assert store.commitlog.flushed_offset >= max(r.end_offset for r in rs)
        stuck = threading.Event()
        monkeypatch.setattr(store.commitlog.files, "sync_range", lambda lo, hi: stuck.wait(5))
        t0 = time.monotonic()
        r = await store.put_async(store.encode("T", 0, [b"late"]))
        stuck.set()
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert 0.15 < time.monotonic() - t0 < 2
    asyncio.run(main())


def test_slow_queue_flush_does_not_hold_up_group_commit(make_store, monkeypatch):
    """Consume-queue fsyncs (one per queue file, each second) run beside the commit log's
    group commit: a SYNC_FLUSH writer is not made to wait for them."""
    store = make_store(flushDiskType="SYNC_FLUSH", syncFlushTimeout=1000)
    store.put(store.encode("T", 0, [b"first"]))  # the queue exists, so the next round flushes it
    in_queue_flush = threading.Event()
    release = threading.Event()
    cq = store.queues[("T", 0)]

    def slow_queue_flush():
        in_queue_flush.set()
        release.wait(5)
    monkeypatch.setattr(cq, "flush", slow_queue_flush)
    try:
        assert in_queue_flush.wait(5)  # the rest round (every 50 ms here) is now stuck
        t0 = time.monotonic()
        results = [store.put(store.encode("T", 1, [b"%d" % i])) for i in range(20)]
        took = time.monotonic() - t0
    finally:
        release.set()
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert store.commitlog.flushed_offset >= results[-1].end_offset
    assert took < 1.0, f"20 durable puts took {took:.2f} s while a queue flush was stuck"


def test_a_message_encoded_again_keeps_its_origin_and_is_found_by_its_new_tags_and_keys(
        make_store):
    """The one re-encoding every delivery path uses (due delayed and timer messages,
    committed half messages, POP redelivery): what the producer set survives the move,
    and the new properties are what the queue's tag filter and the key index see."""
    store = make_store()
    sent = store.encode("Parked", 0, [b"payload"], encode_properties({"TAGS": "old"}), "old",
                        flag=7, born_timestamp=1_700_000_000_123, reconsume_times=2)
    put_result = store.put(sent)
    assert put_result.ok
    parked = read_all(store, "Parked", 0)[0]
    again = store.encode_again(parked, "Real", 3, {"TAGS": "new", "KEYS": "order-42"},
                               reconsume_times=5)
    assert store.put(again).ok
    moved = read_all(store, "Real", 3)[0]
    assert (moved.body, moved.flag, moved.born_timestamp, moved.born_host) == \
        (b"payload", 7, 1_700_000_000_123, parked.born_host)
    assert moved.reconsume_times == 5 and moved.properties == {"TAGS": "new", "KEYS": "order-42"}
    assert [m.body for m in read_all(store, "Real", 3, tag_codes=[tag_hash("new")])] == \
        [b"payload"]
    assert read_all(store, "Real", 3, tag_codes=[tag_hash("old")]) == []
    assert [m.queue_offset for m in store.query_by_key("Real", "order-42")] == [0]


def test_unfiltered_and_filtered_walks_read_the_same(make_store):
    """A pull without a tag filter walks the queue by unpacked tuples; with one, by numpy.
    With every tag wanted the two must read the same bytes, counts and next offsets: random
    sizes over three interleaved queues and 64 KB segments, random offsets and limits."""
    import random
    rng = random.Random(32)
    store = make_store()
    for i in range(900):
        q = rng.randrange(3)
        put(store, "T", q, [bytes([65 + q]) * rng.randrange(1, 3000)], tags=f"t{q}")
    for _ in range(400):
        q = rng.randrange(3)
        hi = store.max_offset_in_queue("T", q)
        offset, count = rng.randrange(hi + 2), rng.randrange(1, 40)
        limit = rng.choice([1, 500, 4096, 20000, 256 * 1024])
        plain = store.get_messages("T", q, offset, count, limit)
        filtered = store.get_messages("T", q, offset, count, limit, [tag_hash(f"t{q}")])
        assert (plain.status, plain.next_begin_offset, plain.message_count,
                plain.total_bytes) == (filtered.status, filtered.next_begin_offset,
                                       filtered.message_count, filtered.total_bytes)
        assert b"".join(plain.buffers) == b"".join(filtered.buffers)
        if plain.message_count:
            assert list(plain.queue_offsets) == list(filtered.queue_offsets)
            assert plain.total_bytes <= limit or plain.message_count == 1
