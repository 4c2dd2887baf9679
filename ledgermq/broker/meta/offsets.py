"""Consumer groups' committed offsets, kept as a small JSON document under
<storePathRootDir>/config, replaced atomically."""
from __future__ import annotations

import asyncio
from pathlib import Path

from ...runtime.files import read_json, write_json_atomically


class ConsumerOffsets:
    """Committed offsets per (topic, group, queue); saved periodically and on stop."""

    def __init__(self, path: Path):
        self.path = path
        doc = read_json(path, {})
        self.table: dict[str, dict[int, int]] = {
            key: {int(q): int(o) for q, o in qs.items()}
            for key, qs in doc.get("offsetTable", {}).items()}
        self.dirty = False

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(self.key(topic, group), {})[queue_id] = offset
        self.dirty = True

    def query(self, topic: str, group: str, queue_id: int) -> int | None:
        return self.table.get(self.key(topic, group), {}).get(queue_id)

    def groups_of(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic)

    def topics_of(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.table if k.split("@", 1)[1] == group)

    def save(self) -> None:
        if self.dirty:
            self.dirty = False
            write_json_atomically(self.path, self._doc())

    async def save_off_loop(self) -> None:
        """save(), its fsync on a worker thread: the event loop serves requests meanwhile
        (the table is copied here, on the loop, which alone changes it)."""
        if self.dirty:
            self.dirty = False
            doc = self._doc()
            await asyncio.get_running_loop().run_in_executor(
                None, write_json_atomically, self.path, doc)

    def _doc(self) -> dict[str, dict[str, dict[str, int]]]:
        return {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())}
                                for k, v in self.table.items()}}
