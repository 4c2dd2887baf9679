"""chaos.disk.damage_flushed on a commit log of real segment files: it hurts only fsynced
bytes, in reach of the store's start-up check, changes every byte it touches, and crosses
segment boundaries."""
import random

import pytest

from ledgermq.chaos.disk import damage_flushed

SEG = 4096


def make_log(tmp_path, segments: int) -> tuple:
    log = tmp_path / "commitlog"
    log.mkdir()
    data = random.Random(0).randbytes(SEG * segments)
    for k in range(segments):
        (log / f"{k * SEG:020d}").write_bytes(data[k * SEG:(k + 1) * SEG])
    return log, data


def read_log(log, segments: int) -> bytes:
    return b"".join((log / f"{k * SEG:020d}").read_bytes() for k in range(segments))


@pytest.mark.parametrize("how", ["zero", "flip"])
@pytest.mark.parametrize("seed", range(20))
def test_damage_stays_in_flushed_bytes_and_changes_each_one(tmp_path, how, seed):
    log, before = make_log(tmp_path, 3)
    flushed = 2 * SEG + 1000  # the third segment is partly unsynced
    hurt = damage_flushed(tmp_path, flushed, 3000, how, random.Random(seed), within=6000)
    after = read_log(log, 3)
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    assert flushed - 6000 <= hurt.offset and hurt.offset + hurt.length <= flushed, hurt
    assert hurt.length == 3000
    assert after[hurt.offset:hurt.offset + hurt.length] == (
        bytes(3000) if how == "zero" else after[hurt.offset:hurt.offset + hurt.length])
    assert changed and hurt.offset <= min(changed) and max(changed) < hurt.offset + 3000
    if how == "flip":  # every byte of the range really changed
        assert len(changed) == 3000


def test_damage_takes_at_most_half_of_what_is_flushed_and_none_of_nothing(tmp_path):
    log, before = make_log(tmp_path, 1)
    hurt = damage_flushed(tmp_path, 1000, 262144, "flip", random.Random(1))
    assert hurt.length == 500 and hurt.offset + 500 <= 1000
    assert read_log(log, 1)[1000:] == before[1000:]
    assert damage_flushed(tmp_path, 0, 4096, "zero", random.Random(1)) is None
