"""The replica's view of its log. The core reads and edits it through this small
interface; MemoryLog keeps entries in a list (the simulator), the broker keeps terms and
commit-log positions in memory and reads entry bytes from its store."""
from __future__ import annotations

from typing import Iterable, Protocol

from .messages import Entry


class RaftLog(Protocol):
    """What the core needs of a log (MemoryLog's interface; the broker's StoreRaftLog)."""

    def __bool__(self) -> bool: ...
    @property
    def begin(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def last_term(self) -> int: ...
    def term_at(self, index: int) -> int | None: ...
    def entry(self, index: int) -> Entry | None: ...
    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]: ...
    def append(self, entries: Iterable[Entry]) -> None: ...
    def truncate_after(self, index: int) -> None: ...
    def reset(self, entry: Entry) -> None: ...
    def bytes_after(self, index: int) -> int: ...


class MemoryLog:
    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        self._cum: list[int] = []  # bytes of data up to and including each entry
        self.append(entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    @property
    def begin(self) -> int:
        return self._entries[0].index if self._entries else 0

    @property
    def end(self) -> int:
        return self._entries[-1].index if self._entries else self.begin - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else 0

    def term_at(self, index: int) -> int | None:
        """The term of entry `index`, None if not held (what most reads of an entry want:
        the broker's log answers it without reading the entry's bytes)."""
        e = self.entry(index)
        return e.term if e else None

    def entry(self, index: int) -> Entry | None:
        if not self._entries or index < self.begin or index > self.end:
            return None
        return self._entries[index - self.begin]

    def entries(self, lo: int, hi: int) -> tuple[Entry, ...]:
        lo = max(lo, self.begin)
        return tuple(self._entries[lo - self.begin:hi - self.begin + 1]) if lo <= hi else ()

    def append(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            self._entries.append(e)
            self._cum.append((self._cum[-1] if self._cum else 0) + len(e.data))

    def truncate_after(self, index: int) -> None:
        keep = max(0, index + 1 - self.begin)
        del self._entries[keep:], self._cum[keep:]

    def reset(self, entry: Entry) -> None:
        self._entries, self._cum = [], []
        self.append((entry,))

    def compact_through(self, index: int) -> None:
        """Forget entries up to `index` (as retention does to the broker's log), keeping
        at least the last one."""
        k = min(max(0, index + 1 - self.begin), len(self._entries) - 1)
        if k > 0:
            dropped = self._cum[k - 1]
            del self._entries[:k], self._cum[:k]
            self._cum = [c - dropped for c in self._cum]

    def bytes_after(self, index: int) -> int:
        """Bytes of entry data above `index` (how far behind a peer at `index` is)."""
        if not self._cum:
            return 0
        k = index - self.begin
        return self._cum[-1] - (self._cum[k] if 0 <= k < len(self._cum) else 0)
