from pathlib import Path

import pytest

from ledgermq.store import MessageStore, StoreConfig


def small_config(root: Path, **overrides) -> StoreConfig:
    """Small segments so tests cross segment boundaries with little data."""
    values = dict(storePathRootDir=str(root), mappedFileSizeCommitLog=64 * 1024,
                  mappedFileSizeConsumeQueue=20 * 256, maxHashSlotNum=512, maxIndexNum=2048,
                  diskMaxUsedSpaceRatio=100, flushIntervalCommitLog=20,
                  flushIntervalConsumeQueue=50)
    values.update(overrides)
    return StoreConfig(**values)


@pytest.fixture
def make_store(tmp_path):
    opened: list[MessageStore] = []

    def make(**overrides) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **overrides))
        store.open()
        opened.append(store)
        return store

    yield make
    for s in opened:
        s.close()
