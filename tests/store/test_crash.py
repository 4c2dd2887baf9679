"""Crash safety with real processes: SIGKILL a SYNC_FLUSH writer at random moments."""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledgermq.store import GetStatus, MessageStore, decode_message

from .conftest import small_config
from .crash_writer import body

WRITER = Path(__file__).with_name("crash_writer.py")


def start_writer(root: Path, rnd: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(WRITER), str(root), str(rnd)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def kill_after(proc: subprocess.Popen, seconds: float) -> list[str]:
    """Let the writer run, SIGKILL it, and return every line it printed (its acks)."""
    time.sleep(seconds)  # a random moment to kill it at (not a wait)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    return out.splitlines()


def verify(root: Path, acked: dict[tuple[int, int], int]) -> MessageStore:
    """Open the store and check every acknowledged message and the log's integrity."""
    store = MessageStore(small_config(root, mappedFileSizeCommitLog=256 * 1024))
    report = store.open()
    assert report.crashed
    # the whole log validates (body CRCs included) up to its end: no torn tail left
    scanned = store.commitlog.scan(store.commitlog.min_offset, store.commitlog.max_offset,
                                   check_crc=True)
    assert sum(m.size for m in scanned) <= store.commitlog.max_offset
    stored: dict[tuple[int, int], bytes] = {}
    for qid in range(4):
        offsets = []
        off = 0
        while True:
            g = store.get_messages("Crash", qid, off, max_count=500, max_bytes=1 << 30)
            if g.status is not GetStatus.FOUND:
                break
            for raw in g.messages():
                m = decode_message(raw)
                offsets.append(m.queue_offset)
                stored[(qid, m.queue_offset)] = m.body
            off = g.next_begin_offset
        assert offsets == list(range(len(offsets)))  # contiguous, no duplicates
    lost = [k for k, seq in acked.items() if stored.get(k) != body(seq)]
    assert not lost, f"{len(lost)} acknowledged messages lost or changed, e.g. {lost[:5]}"
    return store


def test_sigkill_during_sync_flush_writes_loses_nothing_acknowledged(tmp_path):
    rng = random.Random(1234)
    acked: dict[tuple[int, int], int] = {}
    total_rounds = 7
    for rnd in range(1, total_rounds + 1):
        proc = start_writer(tmp_path, rnd)
        lines = kill_after(proc, rng.uniform(0.05, 0.4))
        for line in lines:
            assert not line.startswith("error"), line
            qid, qoff, seq, n = map(int, line.split())
            for i in range(n):
                acked[(qid, qoff + i)] = seq + i
        store = verify(tmp_path, acked)
        store.close()
    assert len(acked) > 500  # the writer got real work done between kills


def _write_and_crash(root: Path) -> dict[tuple[int, int], int]:
    proc = start_writer(root, 1)
    acked = {}
    for line in kill_after(proc, 0.3):
        qid, qoff, seq, n = map(int, line.split())
        for i in range(n):
            acked[(qid, qoff + i)] = seq + i
    return acked


def _last_message(root: Path):
    store = MessageStore(small_config(root, mappedFileSizeCommitLog=256 * 1024))
    store.open()
    msgs = store.commitlog.scan(store.commitlog.min_offset, store.commitlog.max_offset)
    end = store.commitlog.max_offset
    store.close()
    return msgs[-1], end


@pytest.mark.parametrize("damage", ["flip-body-byte", "cut-file-mid-message", "garbage-header"])
def test_recovery_cuts_a_damaged_tail_and_reports_it(tmp_path, damage):
    _write_and_crash(tmp_path)
    last, end = _last_message(tmp_path)
    seg_size = 256 * 1024
    seg_path = tmp_path / "commitlog" / f"{last.phys - last.phys % seg_size:020d}"
    pos = last.phys % seg_size
    with open(seg_path, "r+b") as f:
        if damage == "flip-body-byte":
            f.seek(pos + 90)
            b = f.read(1)
            f.seek(pos + 90)
            f.write(bytes([b[0] ^ 0xFF]))
        elif damage == "garbage-header":
            f.seek(pos + 4)
            f.write(b"\x12\x34\x56\x78")
    if damage == "cut-file-mid-message":
        os.truncate(seg_path, pos + last.size // 2)
    (tmp_path / "checkpoint").unlink()  # as if the crash came before any checkpoint
    (tmp_path / "abort").touch()
    store = MessageStore(small_config(tmp_path, mappedFileSizeCommitLog=256 * 1024))
    report = store.open()
    try:
        assert report.end_offset == last.phys
        assert report.truncated_reason and str(last.phys) in report.truncated_reason
        assert report.truncated_bytes > 0
        assert store.commitlog.max_offset == last.phys
        assert store.max_offset_in_queue("Crash", last.queue_id) == last.queue_offset
        # the cut bytes are gone for good: the next write lands where the damage was
        r = store.put(store.encode("Crash", last.queue_id, [b"after-recovery"]))
        assert r.queue_offset == last.queue_offset and int(r.phys_offsets[0]) == last.phys
    finally:
        store.close()
    with MessageStore(small_config(tmp_path, mappedFileSizeCommitLog=256 * 1024)) as again:
        g = again.get_messages("Crash", last.queue_id, last.queue_offset, max_count=1)
        assert decode_message(g.messages()[0]).body == b"after-recovery"


def test_interrupted_truncation_is_finished_by_recovery(tmp_path):
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as s:
        s.put(s.encode("T", 0, [b"keep"] * 5))
        keep = s.commitlog.max_offset
        s.put(s.encode("T", 0, [b"drop"] * 5))
    # a crash right after the truncation target was made durable, before any byte changed
    (tmp_path / "commitlog" / "truncate.pending").write_bytes(keep.to_bytes(8, "big"))
    (tmp_path / "abort").touch()
    with MessageStore(cfg) as s:
        assert s.commitlog.max_offset == keep
        assert s.max_offset_in_queue("T", 0) == 5
        assert not (tmp_path / "commitlog" / "truncate.pending").exists()


def test_a_cut_segment_followed_only_by_empty_ones_is_the_tail(tmp_path):
    """A crash right after the next segment was created leaves an empty segment after the
    last written one; if that written one is then found cut short, recovery still treats
    it as the tail: extends it, cuts the torn message, drops the empty segment."""
    seg_size = 64 * 1024
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=seg_size)
    with MessageStore(cfg) as s:
        results = [s.put(s.encode("T", 0, [b"m%03d" % i * 20])) for i in range(40)]
        segments = len(s.commitlog.files.files)
        seg = s.commitlog.files.last()
    empty_next = seg.path.with_name(f"{seg.end:020d}")
    with open(empty_next, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, seg_size)
    last = results[-1]
    start = int(last.phys_offsets[0])
    os.truncate(seg.path, start - seg.start + 30)  # the last message is cut mid-way
    (tmp_path / "checkpoint").unlink()  # as if the crash came before any checkpoint
    (tmp_path / "abort").touch()
    with MessageStore(cfg) as again:
        assert again.recovery.end_offset == start
        assert str(start) in again.recovery.truncated_reason
        assert again.max_offset_in_queue("T", 0) == last.queue_offset
        assert len(again.commitlog.files.files) == segments  # the empty one is gone
        r = again.put(again.encode("T", 0, [b"after"]))
        assert r.ok and int(r.phys_offsets[0]) == start


@pytest.mark.parametrize("damage", ["zero-flushed-tail", "flip-flushed-body-byte",
                                    "from-the-properties-before"])
def test_recovery_finds_damage_below_the_checkpoint(tmp_path, damage):
    """Flushed bytes below the checkpoint zeroed or flipped while the broker was down
    (issue #17's corruption fault): recovery re-reads them with their CRCs, and the log
    ends before the message in front of the damage it found (damage that begins in that
    message's properties, which no CRC covers, goes unseen there), its queues with it,
    instead of serving zeros or damaged properties. Damage that begins in that message's
    topic or properties, which no CRC covers, is seen there when it ends the message in a
    zero byte (what no stored message ends in): the log then ends before it in turn."""
    cfg = small_config(tmp_path)  # 64 KiB segments: the damage crosses a boundary
    with MessageStore(cfg) as s:
        for i in range(400):
            s.put(s.encode("Rot", i % 2, [f"m{i}-".encode().ljust(300, b"x")]))
        msgs = s.commitlog.scan(s.commitlog.min_offset, s.commitlog.max_offset)
    end = msgs[-1].phys + msgs[-1].size
    at = next(i for i, m in enumerate(msgs) if m.phys >= end - 100 * 1024)  # last ~100 KiB
    before, victim = msgs[at - 1], msgs[at]
    lo = victim.phys if damage == "zero-flushed-tail" else victim.phys + victim.size - 10
    hi = end if damage == "zero-flushed-tail" else lo + 1
    if damage == "from-the-properties-before":  # the last bytes of `before`, then zeros
        lo, hi = victim.phys - 4, victim.phys + 64  # its topic bytes: no CRC covers them
    for off in range(lo, hi):  # byte by byte across the segment files it touches
        seg = tmp_path / "commitlog" / f"{off - off % cfg.mappedFileSizeCommitLog:020d}"
        with open(seg, "r+b") as f:
            f.seek(off % cfg.mappedFileSizeCommitLog)
            b = f.read(1)
            f.seek(off % cfg.mappedFileSizeCommitLog)
            f.write(b"\0" if damage != "flip-flushed-body-byte" else bytes([b[0] ^ 0xFF]))
    if damage == "from-the-properties-before":  # `before` is the one found damaged
        before, victim = msgs[at - 2], before
    store = MessageStore(cfg)
    report = store.open()
    try:
        assert store.commitlog.max_offset == before.phys, report
        assert report.damaged_from == victim.phys, report
        assert str(victim.phys) in report.truncated_reason
        # the queue of the message before ends before it: nothing unreadable is served
        assert store.max_offset_in_queue("Rot", before.queue_id) == before.queue_offset
        r = store.put(store.encode("Rot", before.queue_id, [b"after"]))
        assert int(r.phys_offsets[0]) == before.phys
    finally:
        store.close()
