"""A full disk under a real broker (a small tmpfs under its store, filled by
chaos.disk.fill): sends are refused with SERVICE_NOT_AVAILABLE saying the disk is full,
the broker keeps serving reads, nothing stored is damaged, and once space returns
(chaos.disk.unfill) writes go on at the right offsets without a restart."""
import asyncio
import os
import shutil
import subprocess

import pytest

from ledgermq import Message, MQClientError, Producer, PullConsumer, PullStatus
from ledgermq.chaos.disk import fill, unfill
from ledgermq.client.admin import Admin
from ledgermq.remoting import ResponseCode

from ..wait import until


@pytest.fixture
def small_disk(tmp_path):
    """A 40 MiB tmpfs, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    yield mnt
    if (mnt / "dev.log").exists():  # kept for a failure's post-mortem
        shutil.copy(mnt / "dev.log", tmp_path / "small-disk-dev.log")
    subprocess.run(["umount", "-l", str(mnt)], check=True)


async def send(p: Producer, topic: str, body: bytes):
    """(queue id, queue offset) of a SEND_OK, or the MQClientError of a refusal."""
    try:
        r = await p.send(Message(topic, body))
    except MQClientError as e:
        return e
    assert r.status.value == "SEND_OK", r
    return r.queue.queue_id, r.queue_offset


async def read_all(namesrv: str, topic: str) -> dict[int, list[bytes]]:
    async with PullConsumer("reader", namesrv) as c:
        out = {}
        for q in await until(lambda: c.fetch_queues(topic), f"{topic}'s route", interval=0.2):
            got, offset = [], 0
            while True:
                r = await c.pull(q, offset, 100)
                if r.status is not PullStatus.FOUND:
                    break
                assert [m.queue_offset for m in r.messages] == \
                    list(range(offset, offset + len(r.messages)))
                got += [m.body for m in r.messages]
                offset = r.next_begin_offset
            if got:
                out[q.queue_id] = got
        return out


def stored(acked: dict) -> dict[int, list[bytes]]:
    """What every queue must hold: its acknowledged bodies in queue order, no gap."""
    out: dict[int, list[bytes]] = {}
    for (qid, qoff), body in sorted(acked.items()):
        assert qoff == len(out.setdefault(qid, [])), f"queue {qid} has a gap before {qoff}"
        out[qid].append(body)
    return out


def test_full_disk_refuses_clearly_keeps_serving_and_recovers(small_disk, dev):
    d = dev({"mappedFileSizeCommitLog": str(1 << 20), "cleanResourceInterval": "200"},
            data=small_disk)
    acked = {"Full": {}, "Fresh": {}}

    async def main():
        async with Producer("p", d.namesrv, retry_times=0, send_timeout=5) as p:
            for i in range(20):
                acked["Full"][await send(p, "Full", b"before-%d" % i)] = b"before-%d" % i
            async with Admin(d.namesrv) as admin:
                await admin.update_topic("Fresh", broker=d.broker, read_queues=2,
                                         write_queues=2)
            fill(small_disk)
            refusals = []
            for topic in ("Fresh", "Created"):
                # the first messages of a queue need its file, a new topic its config: they
                # do not fit
                for i in range(3):
                    r = await send(p, topic, b"fresh-%d" % i)
                    assert isinstance(r, MQClientError), f"{topic} accepted a write: {r}"
                    refusals.append(r)
            # the commit log's current segment fills up; the next one does not fit
            for i in range(2000):
                body = b"full-%d|" % i + bytes(8000)
                r = await send(p, "Full", body)
                if isinstance(r, MQClientError):
                    refusals.append(r)
                    break
                acked["Full"][r] = body
            assert len(refusals) == 7, "the full commit log refused nothing"
            for e in refusals:
                assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in str(e), e
            again = await send(p, "Full", b"still full|" + bytes(8000))
            assert isinstance(again, MQClientError) and \
                again.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert d.proc.poll() is None
            for topic in acked:  # reads go on, and show exactly what was acknowledged
                if acked[topic]:
                    assert await read_all(d.namesrv, topic) == stored(acked[topic])
            unfill(small_disk)

            async def accepted():
                r = await send(p, "Fresh", b"fresh-after")
                return not isinstance(r, MQClientError) and r

            where = await until(accepted, "a send accepted once space returned", timeout=15,
                                interval=0.2)
            acked["Fresh"][where] = b"fresh-after"
            for i in range(200):  # on across segment boundaries, at the right offsets
                body = b"after-%d|" % i + bytes(8000)
                acked["Full"][await send(p, "Full", body)] = body
        for topic in acked:
            assert await read_all(d.namesrv, topic) == stored(acked[topic])

    asyncio.run(main())
    d.stop()
    d.start()  # and the files are sound for a restart

    async def reread():
        for topic in acked:
            assert await read_all(d.namesrv, topic) == stored(acked[topic])
    asyncio.run(reread())
    d.stop()


def test_writes_stop_at_disk_max_used_space_ratio_before_the_disk_is_full(small_disk, dev):
    d = dev({"diskMaxUsedSpaceRatio": "70", "cleanResourceInterval": "200"}, data=small_disk)

    async def main():
        async with Producer("p", d.namesrv, retry_times=0, send_timeout=5) as p:
            oks = []
            first = await send(p, "Ratio", b"first")
            assert not isinstance(first, MQClientError), first
            st = os.statvfs(small_disk)
            fill(small_disk, leave=st.f_blocks * st.f_frsize // 5)  # 80% used, not full

            async def refused():  # sends go on until the cleaner has measured the disk
                r = await send(p, "Ratio", b"before-the-check")
                oks.append(r)
                return isinstance(r, MQClientError) and oks.pop()
            e = await until(refused, "a refusal above diskMaxUsedSpaceRatio", timeout=10,
                            interval=0.1)
            assert e.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "disk full" in str(e) and "diskMaxUsedSpaceRatio=70" in str(e), e
            unfill(small_disk)

            async def accepted():
                r = await send(p, "Ratio", b"accepted")
                return not isinstance(r, MQClientError) and r
            await until(accepted, "a send accepted below the ratio", timeout=10, interval=0.1)
        bodies = [b for q in (await read_all(d.namesrv, "Ratio")).values() for b in q]
        assert sorted(bodies) == [b"accepted"] + [b"before-the-check"] * len(oks) + [b"first"]

    asyncio.run(main())


def test_writes_resume_within_seconds_of_space_returning(small_disk, dev):
    """With the disk measured only once a minute (cleanResourceInterval), a full disk is
    measured again every second while writes are refused: they resume within seconds of
    space returning, not at the next round."""
    d = dev({"mappedFileSizeCommitLog": str(1 << 20), "cleanResourceInterval": "60000"},
            data=small_disk)

    async def main():
        async with Producer("p", d.namesrv, retry_times=0, send_timeout=5) as p:
            assert not isinstance(await send(p, "Back", b"first"), MQClientError)
            fill(small_disk)
            for i in range(2000):  # until the log's next segment does not fit
                if isinstance(await send(p, "Back", b"fill-%d|" % i + bytes(8000)),
                              MQClientError):
                    break
            else:
                raise AssertionError("the full disk refused nothing")
            unfill(small_disk)

            async def accepted():
                r = await send(p, "Back", b"after")
                return not isinstance(r, MQClientError) and r
            await until(accepted, "a send accepted once space returned", timeout=4,
                        interval=0.2)

    asyncio.run(main())
    d.stop()
