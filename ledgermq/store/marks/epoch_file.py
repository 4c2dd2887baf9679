"""The EpochFile of a controller-mode broker (S1-4): `<epoch, startOffset>` entries,
oldest first, replaced atomically and fsynced on every change, so a crash leaves the old
list or the new one."""
from __future__ import annotations

from pathlib import Path

from ...runtime.files import replace_file
from ..mapped_file import StoreError


class EpochFile:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.entries: list[tuple[int, int]] = []
        if self.path.exists():
            for n, line in enumerate(self.path.read_text().splitlines(), 1):
                try:
                    epoch, start = (int(x) for x in line.split())
                except ValueError:
                    raise StoreError(f"{self.path} line {n} is not '<epoch> <startOffset>': "
                                     f"{line!r}") from None
                self.entries.append((epoch, start))

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def append(self, epoch: int, start: int) -> None:
        """A new master term: epochs only grow, and start where the log ends."""
        if self.entries and (epoch <= self.entries[-1][0] or start < self.entries[-1][1]):
            raise StoreError(f"epoch {epoch} at {start} cannot follow epoch "
                             f"{self.entries[-1][0]} at {self.entries[-1][1]}")
        self.entries.append((epoch, start))
        self._save()

    def truncate_from(self, offset: int) -> None:
        """The log was cut at `offset`: epochs that start there or later are gone."""
        kept = [e for e in self.entries if e[1] < offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        replace_file(self.path, "".join(f"{e} {s}\n" for e, s in self.entries).encode())
