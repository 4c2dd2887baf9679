"""The workload's history, kept as Jepsen keeps one: every send attempt (invoked, then
completed with an outcome), every read, every fault window and the final drain.

Outcomes: `ok` = acknowledged with a status; `fail` = definitely not written (the broker
refused it, or it never left the client); `info` = indeterminate (a timeout, FLUSH_*_TIMEOUT
or a lost connection: it may or may not have been written). An attempt with no completion
is indeterminate too: the run stopped while it was in flight.

`HistoryWriter` appends each record as one JSON line in a single write, so a run that crashes
keeps everything up to its last whole line; `load` reads a file back (a torn last line is
ignored with a note). `History` is the same record in memory, which the checker reads.

Times are seconds since the recorder opened (monotonic), unless the caller passes `at`.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import orjson

OUTCOMES = ("ok", "fail", "info")


class HistoryError(ValueError):
    """A record that cannot be part of a history (or a file line that is not one)."""


@dataclass(slots=True)
class Attempt:
    """One send: its unique id (the message's UNIQ_KEY), key, target and what became of it.
    `broker` / `queue` are where it was aimed, or where the acknowledgement says it went."""
    id: str
    topic: str
    invoked: float
    key: str | None = None
    broker: str | None = None
    queue: int | None = None
    orderly: bool = False  # sent in order with its key: the checker checks the read order
    outcome: str = "info"
    completed: float | None = None
    status: str | None = None
    offset: int | None = None
    error: str | None = None

    @property
    def latency(self) -> float | None:
        return None if self.completed is None else self.completed - self.invoked


@dataclass(slots=True)
class Read:
    """A message read by `reader` (a consumer group, a pull reader, the drain)."""
    id: str
    topic: str
    at: float
    reader: str
    broker: str | None = None
    queue: int | None = None
    offset: int | None = None


@dataclass(slots=True)
class FaultWindow:
    name: str
    nodes: tuple[str, ...]
    start: float
    end: float | None = None  # None: never healed


class _Recorder:
    """The record-making calls shared by the in-memory history and the file writer: each
    builds one record and hands it to `_record`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._t0 = clock()

    def _at(self, at: float | None) -> float:
        return round(self._clock() - self._t0, 6) if at is None else at

    def meta(self, **fields) -> None:
        """Facts about the run (mode, seed, faults asked for...): merged into `facts`."""
        self._record({"t": "meta", **fields})

    def invoke(self, id: str, *, topic: str, key: str | None = None, broker: str | None = None,
               queue: int | None = None, orderly: bool = False,
               at: float | None = None) -> None:
        self._record(_compact({"t": "invoke", "id": id, "topic": topic, "key": key,
                               "broker": broker, "queue": queue,
                               "orderly": orderly or None, "at": self._at(at)}))

    def complete(self, id: str, outcome: str, *, status: str | None = None,
                 broker: str | None = None, queue: int | None = None,
                 offset: int | None = None, error: str | None = None,
                 at: float | None = None) -> None:
        if outcome not in OUTCOMES:
            raise HistoryError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        self._record(_compact({"t": "complete", "id": id, "outcome": outcome,
                               "status": status, "broker": broker, "queue": queue,
                               "offset": offset, "error": error, "at": self._at(at)}))

    def read(self, id: str, *, topic: str, reader: str, broker: str | None = None,
             queue: int | None = None, offset: int | None = None,
             at: float | None = None) -> None:
        self._record(_compact({"t": "read", "id": id, "topic": topic, "reader": reader,
                               "broker": broker, "queue": queue, "offset": offset,
                               "at": self._at(at)}))

    def fault_start(self, name: str, nodes: Iterable[str], at: float | None = None) -> int:
        """Open a fault window; returns its number, for `fault_end`."""
        n = self._fault_count()
        self._record({"t": "fault-start", "n": n, "name": name, "nodes": list(nodes),
                      "at": self._at(at)})
        return n

    def fault_end(self, n: int, at: float | None = None) -> None:
        self._record({"t": "fault-end", "n": n, "at": self._at(at)})

    def drain_start(self, at: float | None = None) -> None:
        self._record({"t": "drain-start", "at": self._at(at)})

    def drain_end(self, at: float | None = None,
                  queues: Iterable[tuple[str, int, int]] | None = None) -> None:
        """`queues`: each (broker, queue id, end offset) the drain read to its end."""
        rec: dict = {"t": "drain-end", "at": self._at(at)}
        if queues is not None:
            rec["queues"] = [[b, q, end] for b, q, end in queues]
        self._record(rec)

    def _record(self, rec: dict) -> None:
        raise NotImplementedError

    def _fault_count(self) -> int:
        raise NotImplementedError


class History(_Recorder):
    """A history in memory: attempts by id (in invoke order), reads in the order recorded,
    fault windows by number, the drain's (start, end), `notes` from loading."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        self.facts: dict = {}  # what `meta(...)` recorded: mode, seed, faults asked for
        self.attempts: dict[str, Attempt] = {}
        self.reads: list[Read] = []
        self.faults: list[FaultWindow] = []
        self.drain: tuple[float | None, float | None] | None = None
        # (broker, queue id) -> the end offset the drain read it to; None: not recorded
        self.drain_queues: dict[tuple[str, int], int] | None = None
        self.notes: list[str] = []

    def _fault_count(self) -> int:
        return len(self.faults)

    def _record(self, rec: dict) -> None:
        self.apply(rec)

    def apply(self, rec: dict) -> None:
        """Add one record (as written in a file); HistoryError if it makes no sense."""
        kind, at = rec.get("t"), rec.get("at")
        if kind != "meta" and not isinstance(at, int | float):
            raise HistoryError(f"a {kind!r} record needs a time 'at', got {at!r}")
        if kind == "invoke":
            if rec["id"] in self.attempts:
                raise HistoryError(f"{rec['id']} already invoked")
            self.attempts[rec["id"]] = Attempt(
                id=rec["id"], topic=rec["topic"], invoked=at, key=rec.get("key"),
                broker=rec.get("broker"), queue=rec.get("queue"),
                orderly=bool(rec.get("orderly")))
        elif kind == "complete":
            a = self.attempts.get(rec["id"])
            if a is None:
                raise HistoryError(f"completion of {rec['id']}, never invoked")
            if rec["outcome"] not in OUTCOMES:
                raise HistoryError(f"outcome must be one of {OUTCOMES}, got {rec['outcome']!r}")
            a.outcome, a.completed = rec["outcome"], at
            a.status, a.offset, a.error = rec.get("status"), rec.get("offset"), rec.get("error")
            a.broker = rec.get("broker", a.broker)
            a.queue = rec.get("queue", a.queue)
        elif kind == "read":
            self.reads.append(Read(id=rec["id"], topic=rec["topic"], at=at,
                                   reader=rec["reader"], broker=rec.get("broker"),
                                   queue=rec.get("queue"), offset=rec.get("offset")))
        elif kind == "fault-start":
            if rec["n"] != len(self.faults):
                raise HistoryError(f"fault window {rec['n']} opened out of turn")
            self.faults.append(FaultWindow(rec["name"], tuple(rec["nodes"]), at))
        elif kind == "fault-end":
            n = rec["n"]
            if not isinstance(n, int) or not 0 <= n < len(self.faults):
                raise HistoryError(f"no fault window {n} to end")
            self.faults[n].end = at
        elif kind == "drain-start":
            self.drain = (at, None)
        elif kind == "drain-end":
            self.drain = (self.drain[0] if self.drain else None, at)
            if "queues" in rec:
                self.drain_queues = {(b, int(q)): int(end) for b, q, end in rec["queues"]}
        elif kind == "meta":
            self.facts.update({k: v for k, v in rec.items() if k != "t"})
        else:
            raise HistoryError(f"unknown record kind {kind!r}")

    @property
    def drained(self) -> bool:
        """Whether the final drain finished: only then is an unread message lost."""
        return self.drain is not None and self.drain[1] is not None


class HistoryWriter(_Recorder):
    """Appends a history to `path` (created anew), one record per line, each in a single
    write as it happens; thread-safe. `history` holds the same records in memory."""

    def __init__(self, path: str | os.PathLike, clock: Callable[[], float] = time.monotonic):
        super().__init__(clock)
        self.path = Path(path)
        self.history = History(clock)
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                           0o644)

    def _fault_count(self) -> int:
        return len(self.history.faults)

    def _record(self, rec: dict) -> None:
        line = orjson.dumps(rec) + b"\n"
        with self._lock:
            if self._fd < 0:
                raise HistoryError(f"history {self.path} is closed")
            try:
                self.history.apply(rec)  # refuse first what the checker could not read back
            except (KeyError, TypeError) as e:
                raise HistoryError(f"bad {rec.get('t')!r} record {rec}: {e!r}") from e
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load(path: str | os.PathLike) -> History:
    """Read a history file back. A last line cut short (the run died mid-write) is ignored
    with a note in `notes`; any other bad line is a HistoryError naming its line number."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    torn_possible = not data.endswith(b"\n")  # the last piece has no newline of its own
    h = History(clock=lambda: 0.0)
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = orjson.loads(raw)
            if not isinstance(rec, dict):
                raise HistoryError(f"a record is a JSON object, got {type(rec).__name__}")
        except orjson.JSONDecodeError as e:
            if torn_possible and i == len(lines):
                h.notes.append(f"{path}: torn last line {i} ({len(raw)} bytes) ignored")
                break
            raise HistoryError(f"{path} line {i}: not JSON ({e})") from e
        except HistoryError as e:
            raise HistoryError(f"{path} line {i}: {e}") from e
        try:
            h.apply(rec)
        except HistoryError as e:
            raise HistoryError(f"{path} line {i}: {e}") from e
        except (KeyError, TypeError) as e:
            raise HistoryError(f"{path} line {i}: bad {rec.get('t')!r} record: {e!r}") from e
    return h


def _compact(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if v is not None}
