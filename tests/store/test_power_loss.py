"""Lost unsynced writes on a real broker: load, kill -9, cut the commit log back to a
random point at or after its last fsync (chaos.disk.cut_unsynced, as a power loss would),
restart. Every SEND_OK under SYNC_FLUSH, and every message wholly below the cut under
either flush type, is read back where it was acknowledged; nothing else is served (queue
and index entries past the recovered end are gone); the broker takes writes again."""
import asyncio
import os
import random
import signal

import pytest

from ledgermq import Message, MQClientError, Producer, PullConsumer, PullStatus
from ledgermq.chaos.disk import commitlog_dir, cut_unsynced, read_flushed
from ledgermq.client.admin import Admin
from ledgermq.remoting import (
    RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode,
)
from ledgermq.wire.message import decode_offset_msg_id, encode_properties

from ..wait import until

TOPIC = "PowerLoss"


async def load_then_kill(d, sent: set, acked: dict, prefix: str, kill_after: int) -> None:
    """Concurrent sends; SIGKILL the broker once `kill_after` of them were acknowledged,
    with sends still in flight. acked: body -> (queue id, queue offset, commit-log offset)."""
    stop = asyncio.Event()

    async def sender(p, w):
        i = 0
        while not stop.is_set():
            body = f"{prefix}-{w}-{i}|".encode() + bytes([i % 251]) * (i * 37 % 900)
            i += 1
            sent.add(body)
            try:
                r = await p.send(Message(TOPIC, body, keys=body[:body.index(b"|")].decode()))
            except (MQClientError, RemotingError, OSError):
                return
            if r.status.value == "SEND_OK":
                acked[body] = (r.queue.queue_id, r.queue_offset,
                               decode_offset_msg_id(r.offset_msg_id)[2])
                if len(acked) >= kill_after and not stop.is_set():
                    stop.set()
                    os.kill(d.proc.pid, signal.SIGKILL)

    async with Producer("p-" + prefix, d.namesrv, retry_times=0, send_timeout=3) as p:
        await asyncio.wait_for(asyncio.gather(*(sender(p, w) for w in range(16))), 60)


async def read_queues(namesrv: str) -> dict[int, list]:
    async with PullConsumer("reader", namesrv) as c:
        queues = await until(lambda: c.fetch_queues(TOPIC), "the topic's route", timeout=15,
                             interval=0.2)
        out = {}
        for q in queues:
            got, offset = [], 0
            while True:
                r = await c.pull(q, offset, 200)
                if r.status is not PullStatus.FOUND:
                    break
                got += r.messages
                offset = r.next_begin_offset
            out[q.queue_id] = got
        return out


def guaranteed(acked: dict, cut_at: int, sync: bool) -> dict:
    """What must survive: every ack under SYNC_FLUSH; and any acked message that ends at
    or below the cut (it ends where the next acked message begins, or before)."""
    by_phys = sorted(acked.items(), key=lambda kv: kv[1][2])
    must = {}
    for i, (body, where) in enumerate(by_phys):
        ends_by = by_phys[i + 1][1][2] if i + 1 < len(by_phys) else None
        if sync or (ends_by is not None and ends_by <= cut_at):
            must[body] = where
    return must


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_lost_unsynced_writes_recovered_without_serving_anything_unreadable(dev, flush):
    rng = random.Random(f"power-loss-{flush}")
    d = dev({"flushDiskType": flush, "mappedFileSizeCommitLog": str(256 * 1024),
             "flushIntervalCommitLog": "300"})
    ports = d.ports
    sent: set = set()
    acked: dict = {}
    must: dict = {}
    for rnd in range(3):
        asyncio.run(load_then_kill(d, sent, acked, f"r{rnd}", len(acked) + 1500))
        assert d.proc.wait(timeout=15) == -signal.SIGKILL
        log_dir = commitlog_dir(d.data / "store")
        flushed = read_flushed(log_dir)
        assert flushed is not None
        cut = cut_unsynced(d.data / "store", flushed, rng)
        # the kill left unsynced bytes behind, and the cut kept every fsynced one
        assert cut.flushed <= cut.offset <= cut.written_end
        must.update(guaranteed({b: w for b, w in acked.items() if b not in must}, cut.offset,
                               flush == "SYNC_FLUSH"))
        d.start(*ports)  # the broker starts on the cut files
        served = asyncio.run(read_queues(d.namesrv))
        read_at = {}
        for qid, msgs in served.items():
            for pos, m in enumerate(msgs):
                assert m.queue_offset == pos and m.queue_id == qid, \
                    f"queue {qid} serves {m.queue_id}/{m.queue_offset} at {pos}"
                assert m.body in sent, f"{m.body[:40]} was never sent"
                assert m.body not in read_at, f"{m.body[:40]} served twice"
                read_at[m.body] = (qid, pos)
        lost = [b[:30] for b, (q, o, _) in must.items() if read_at.get(b) != (q, o)]
        assert not lost, f"round {rnd} ({cut}): {len(lost)} of {len(must)} lost, e.g. {lost[:3]}"
        # what a cut removed is not served, by queue nor by key; writes go on after it
        gone = [b for b in acked if b not in read_at]
        acked_before = dict(acked)
        for b in gone:
            del acked[b]

        async def after():
            """Writes go on where the cut left the log, over the bytes the cut messages had:
            a key lookup must not find those messages (nor fail) through stale index entries."""
            async with Producer("p-after", d.namesrv, retry_times=0, send_timeout=5) as p:
                for i in range(300):
                    body = f"after{rnd}-{i}|".encode() + bytes(i % 400)
                    sent.add(body)
                    r = await p.send(Message(TOPIC, body, keys=f"after{rnd}-{i}"))
                    assert r.status.value == "SEND_OK", r
                    phys = decode_offset_msg_id(r.offset_msg_id)[2]
                    acked[body] = (r.queue.queue_id, r.queue_offset, phys)
                    assert r.queue_offset == len(served[r.queue.queue_id])
                    served[r.queue.queue_id].append(body)
            overwritten = [b for b in gone if acked_before[b][2] < phys]
            client = RemotingClient()
            try:
                for b in overwritten[:30]:
                    key = b[:b.index(b"|")].decode()
                    resp = await client.invoke(d.broker, RemotingCommand(
                        RequestCode.QUERY_MESSAGE, ext={"topic": TOPIC, "key": key,
                                                        "maxNum": "32"}))
                    assert resp.code == ResponseCode.QUERY_NOT_FOUND, (key, resp.remark)
            finally:
                await client.close()
            async with Admin(d.namesrv) as admin:
                found = await admin.query_msg_by_key(TOPIC, f"after{rnd}-7")
                assert [m.body[:9] for m in found] == [f"after{rnd}-7|".encode()]
        asyncio.run(after())
        again = asyncio.run(read_queues(d.namesrv))
        assert sum(map(len, again.values())) == len(read_at) + 300


def test_the_published_flushed_offset_covers_every_sync_flush_ack(make_store):
    store = make_store(flushDiskType="SYNC_FLUSH")
    log_dir = store.commitlog.dir
    for i in range(50):
        r = store.put(store.encode("T", i % 2, [b"x%d" % i * (i * 53 % 3000)]))
        assert r.ok and read_flushed(log_dir) >= r.end_offset
    keep = int(r.phys_offsets[0])
    store.truncate(keep)  # what is cut off is no longer claimed durable
    assert read_flushed(log_dir) == keep


def test_key_lookups_skip_index_entries_the_log_was_cut_under(make_store):
    """A cut leaves index entries pointing into bytes new messages now hold (a power loss
    leaves them as the kill found them): a lookup finds nothing there, and does not fail."""
    store = make_store()

    def put(body: bytes, key: str):
        return store.put(store.encode("T", 0, [body], encode_properties({"KEYS": key}),
                                      index_keys=[[key]]))
    keep = put(b"kept", "kept").end_offset
    for i in range(30):
        put(b"cut-%d|" % i + bytes(i * 7), f"cut{i}")
    store.truncate(keep)
    for i in range(30):
        put(bytes([65 + i % 20]) * (i * 13 + 5), f"new{i}")
    assert [m.body for m in store.query_by_key("T", "kept")] == [b"kept"]
    for i in range(30):
        assert store.query_by_key("T", f"cut{i}") == []
    assert [m.index_keys for m in store.query_by_key("T", "new7")] == [["new7"]]
