"""Epochs and the handshake truncation (S1-4, S1-5), and the EpochFile on disk."""
import pytest

from ledgermq.replication.autoswitch import epoch_ranges, truncate_point
from ledgermq.store.marks.epoch_file import EpochFile
from ledgermq.store.mapped_file import StoreError


def test_epoch_ranges():
    assert epoch_ranges([(1, 0), (3, 100), (4, 250)], 300) == {
        1: (0, 100), 3: (100, 250), 4: (250, 300)}


def test_slave_cuts_where_its_epochs_and_the_masters_part():
    # the old master wrote epoch 2 up to 500, but the new master's epoch 2 ended at 400
    # (it took over there and began epoch 3)
    slave = [(1, 0), (2, 200)]
    master = [(1, 0), (2, 200), (3, 400)]
    assert truncate_point(slave, 500, master, 900) == 400
    # a slave behind the master keeps everything
    assert truncate_point([(1, 0), (2, 200)], 300, master, 900) == 300
    # same epoch number, different start: not the same epoch; fall back to an older one
    assert truncate_point([(1, 0), (2, 250)], 600, master, 900) == 200
    # nothing in common
    assert truncate_point([(7, 0)], 50, master, 900) is None
    # the known bug keeps the foreign tail
    assert truncate_point(slave, 500, master, 900, bug="truncate-to-own-max") == 500


def test_epoch_file_survives_reopen_and_truncation(tmp_path):
    f = EpochFile(tmp_path / "epoch")
    f.append(1, 0)
    f.append(2, 300)
    f.append(4, 700)
    with pytest.raises(StoreError):
        f.append(3, 800)  # epochs only grow
    f.truncate_from(700)
    assert EpochFile(tmp_path / "epoch").entries == [(1, 0), (2, 300)]
    (tmp_path / "bad").write_text("1 0\nnonsense\n")
    with pytest.raises(StoreError, match="line 2"):
        EpochFile(tmp_path / "bad")
