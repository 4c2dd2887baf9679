"""Raft's safety properties (S0 and the controller group), checked incrementally after
every step of the raft simulator. Each Violation names the property it breaks:

- election-safety: at most one leader per term;
- log-matching: an entry (index, term) follows the same prefix on every node;
- append-contiguous: a node appends entries only right after its last one;
- commit-within-log: a node's committed index never passes the end of its log;
- commit-monotonic: within one incarnation, a node's committed index never goes back;
- state-machine-safety: every node commits the same entry at an index;
- leader-completeness: a leader of a later term holds every entry committed in its own
  term (so, by log matching, every entry below one) and every acknowledged append;
- ack-uniqueness: one index is acknowledged for one append only.
"""
from __future__ import annotations

import hashlib

from ..replication.raft import Entry, RaftNode, Role
from .result import Violation

INVARIANTS = {
    "election-safety": "at most one leader per term",
    "log-matching": "an entry (index, term) follows the same prefix everywhere",
    "append-contiguous": "a node appends right after its last entry",
    "commit-within-log": "a node's committed index is within its log",
    "commit-monotonic": "a node's committed index never goes back (within an incarnation)",
    "state-machine-safety": "every node commits the same entry at an index",
    "leader-completeness": "a leader of a later term holds what was committed",
    "ack-uniqueness": "an index is acknowledged for one append only",
}


class Checker:
    def __init__(self):
        self.leaders: dict[int, str] = {}  # term -> leader
        self.chain: dict[tuple[int, int], bytes] = {}  # (index, term) -> prefix hash
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, data)
        # index -> the term of the first node seen committing it: the term it committed
        # in (its leader sees it first), or later (a restart reading its saved index)
        self.commit_term: dict[int, int] = {}
        self.acked: dict[int, tuple[bytes, int]] = {}  # index -> (data, term it committed in)
        self.commit_seen: dict[str, int] = {}
        self.hashes: dict[str, list[bytes]] = {}  # node -> prefix hash of each entry
        # node -> the index its hashes start at; None when its log cannot be chained
        self.base: dict[str, int | None] = {}

    @staticmethod
    def _h(prev: bytes, e: Entry) -> bytes:
        return hashlib.blake2b(prev + e.index.to_bytes(8, "big") + e.term.to_bytes(8, "big")
                               + e.data, digest_size=12).digest()

    def load(self, node_id: str, log: list[Entry]) -> None:
        """A node (re)starts with `log`. A log that starts past a compaction is chained
        from its first entry when that entry is a committed one: its prefix is then the
        committed prefix, whose hash the chain holds."""
        self.hashes[node_id], self.base[node_id] = [], 0
        if log and log[0].index > 0:
            first = log[0]
            prefix = self.chain.get((first.index, first.term))
            if prefix is None or self.committed.get(first.index) != (first.term, first.data):
                self.base[node_id] = None  # nothing to chain it to
                return
            self.hashes[node_id], self.base[node_id] = [prefix], first.index
            log = log[1:]
        self.appended(node_id, log)

    def appended(self, node_id: str, entries) -> None:
        hashes, base = self.hashes[node_id], self.base[node_id]
        if base is None:
            return
        for e in entries:
            if e.index != base + len(hashes):
                raise Violation("append-contiguous", f"{node_id} appended entry {e.index} "
                                f"after {base + len(hashes) - 1}")
            h = self._h(hashes[-1] if hashes else b"", e)
            hashes.append(h)
            seen = self.chain.setdefault((e.index, e.term), h)
            if seen != h:
                raise Violation("log-matching", f"log matching broken on {node_id}: entry "
                                f"({e.index}, term {e.term}) follows a different prefix than "
                                f"elsewhere")

    def truncated(self, node_id: str, index: int) -> None:
        base = self.base[node_id]
        if base is not None and index < base:  # its chained first entry went too
            self.hashes[node_id], self.base[node_id] = [], (0 if index < 0 else None)
        elif base is not None:
            del self.hashes[node_id][index + 1 - base:]

    def reset(self, node_id: str, entry: Entry) -> None:
        self.load(node_id, [entry])

    def check_node(self, n: RaftNode, incarnation: int) -> None:
        if n.role is Role.LEADER:
            other = self.leaders.setdefault(n.term, n.id)
            if other != n.id:
                raise Violation("election-safety", f"two leaders in term {n.term}: {other} "
                                f"and {n.id}")
        if n.commit > n.end:
            raise Violation("commit-within-log", f"{n.id} committed index {n.commit} is above "
                            f"its end {n.end}")
        key = f"{n.id}#{incarnation}"
        seen = self.commit_seen.get(key, -1)
        if n.commit < seen:
            raise Violation("commit-monotonic", f"{n.id} committed index went back from "
                            f"{seen} to {n.commit}")
        for i in range(max(seen + 1, n.begin), n.commit + 1):
            e = n.entry(i)
            prev = self.committed.setdefault(i, (e.term, e.data))
            self.commit_term.setdefault(i, n.term)
            if prev != (e.term, e.data):
                raise Violation("state-machine-safety", f"committed entry {i} differs on "
                                f"{n.id}: {prev} vs ({e.term}, {e.data!r})")
        self.commit_seen[key] = n.commit

    def became_leader(self, n: RaftNode) -> None:
        """What was committed (acknowledged) in term T is in every leader of a later term (a
        leader of an older term may still turn up late, and is harmless). Entries are
        checked where they committed in their own term: an older entry beneath one is
        covered by log matching, and one committed alone (Raft's figure 8) breaks
        state-machine safety instead."""
        for index, (term, data) in self.committed.items():
            if term != self.commit_term[index] or n.term <= term or index < n.begin:
                continue
            e = n.entry(index)
            if e is None or (e.term, e.data) != (term, data):
                raise Violation("leader-completeness", f"entry {index} (term {term}) "
                                f"committed by term {self.commit_term[index]} is missing "
                                f"from leader {n.id} of term {n.term} (has {e})")
        for index, (data, term) in self.acked.items():
            if n.term <= term or index < n.begin:  # (below begin: committed, then compacted)
                continue
            e = n.entry(index)
            if e is None or e.data != data:
                raise Violation("leader-completeness", f"acknowledged append at {index} "
                                f"({data!r}, term {term}) is missing from leader {n.id} of "
                                f"term {n.term} (has {e})")

    def acknowledged(self, index: int, data: bytes, term: int) -> None:
        prev = self.acked.setdefault(index, (data, term))
        if prev[0] != data:
            raise Violation("ack-uniqueness", f"two different appends acknowledged at index "
                            f"{index}")
