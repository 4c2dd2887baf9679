"""Message-store settings, named as RocketMQ's broker.conf keys."""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.config import ConfigError, check, non_negative, percent, positive, validate


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"  # background flush every flushIntervalCommitLog ms
    SYNC_FLUSH = "SYNC_FLUSH"  # a write is acknowledged once fsynced (group commit)


def _segment_size(v: int) -> str | None:
    return None if v >= 4096 else "must be at least 4096 bytes"


@dataclass
class StoreConfig:
    storePathRootDir: str = field(default_factory=lambda: os.path.expanduser("~/store"))
    storePathCommitLog: str = ""  # default: <storePathRootDir>/commitlog
    mappedFileSizeCommitLog: int = field(default=1 << 30, metadata=check(_segment_size))
    mappedFileSizeConsumeQueue: int = field(default=300_000 * 20, metadata=check(positive))
    flushDiskType: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    # recovery re-reads (CRCs too) this many bytes below the checkpoint: flushed bytes a
    # disk zeroed or flipped are found, and the log ends before them (0: trust the flush)
    recoverVerifyBytes: int = field(default=64 << 20, metadata=check(non_negative))
    flushIntervalCommitLog: int = field(default=500, metadata=check(positive))
    flushIntervalConsumeQueue: int = field(default=1000, metadata=check(positive))
    syncFlushTimeout: int = field(default=5000, metadata=check(positive))
    fileReservedTime: float = field(default=72, metadata=check(positive))  # hours
    cleanResourceInterval: int = field(default=10_000, metadata=check(positive))  # ms
    diskMaxUsedSpaceRatio: float = field(default=90, metadata=check(percent))
    maxMessageSize: int = field(default=4 * 1024 * 1024, metadata=check(positive))
    messageIndexEnable: bool = True
    maxHashSlotNum: int = field(default=5_000_000, metadata=check(positive))
    maxIndexNum: int = field(default=20_000_000, metadata=check(positive))
    maxTransferCountOnMessageInMemory: int = field(default=32, metadata=check(positive))
    maxTransferBytesOnMessageInMemory: int = field(default=256 * 1024, metadata=check(positive))
    accessMessageInMemoryMaxRatio: int = field(default=40, metadata=check(non_negative))

    def __post_init__(self) -> None:
        if isinstance(self.flushDiskType, str):
            try:
                self.flushDiskType = FlushDiskType[self.flushDiskType]
            except KeyError:
                raise ConfigError(f"flushDiskType={self.flushDiskType!r} is not one of "
                                  f"ASYNC_FLUSH, SYNC_FLUSH") from None
        validate(self)

    @property
    def root(self) -> Path:
        return Path(self.storePathRootDir)

    @property
    def commitlog_dir(self) -> Path:
        return Path(self.storePathCommitLog) if self.storePathCommitLog else self.root / "commitlog"

    @property
    def entries_per_cq_file(self) -> int:
        return max(1, self.mappedFileSizeConsumeQueue // 20)
