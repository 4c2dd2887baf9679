"""The queue-model check of a history, as Jepsen's total-queue checker makes it:

- lost: acknowledged (`ok`) but not read by the final drain, which reads every queue from
  its first message: the log no longer has it. Jepsen's queue checker counts only messages
  never read by anyone; a message a consumer read and a damaged disk then destroyed would
  pass that, so those are lost here too, and counted apart (`read_before`);
- unexpected: read but never attempted;
- failed but read: a send the client was told definitely failed, read all the same;
- duplicates: read more than once by one reader (redelivery; two readers each reading a
  message once is no duplicate), and those stored twice (read at two queue positions);
  at-least-once allows them, a mode whose design rules them out says `duplicates_allowed`;
- indeterminate sends (`info`) and how many of them were read;
- order: for orderly sends, a key's message read (first time, by one reader, within one
  queue) after one of the same key that was only sent once it had been acknowledged;
- per fault window: recovery time from its start and from its heal to the first
  acknowledged send invoked after it, throughput and send latency percentiles;
  `window_recovery`: for the groups a window hit (the runner knows them), the longest
  stretch without an acknowledgement, and without a consumer reading what was sent to
  them (#34's recovery targets).

`check` returns a dict ready for results.json (plain ints, floats, strings, lists).
"""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from .history import History

MAX_IDS = 100  # ids listed per category (the counts are exact)
PERCENTILES = (50, 95, 99)


def check(h: History, *, duplicates_allowed: bool = True) -> dict:
    ok = {m for m, a in h.attempts.items() if a.outcome == "ok"}
    failed = {m for m, a in h.attempts.items() if a.outcome == "fail"}
    info = {m for m, a in h.attempts.items() if a.outcome == "info"}
    read = {r.id for r in h.reads}
    lost = lost_ids(h)
    unexpected = read - h.attempts.keys()
    failed_read = failed & read
    dups = _duplicates(h, duplicates_allowed)
    order = _order(h)
    sends = _Sends(h)
    unreached, short = drain_gaps(h)
    res = {
        "drained": h.drained and not unreached,
        "drain_gaps": {"unreached": unreached, "short": short},
        "attempts": {"total": len(h.attempts), "ok": len(ok), "fail": len(failed),
                     "info": len(info)},
        "reads": {"total": len(h.reads), "distinct": len(read),
                  "readers": dict(Counter(r.reader for r in h.reads))},
        "lost": {**_ids(lost), "read_before": len(lost & read)},
        "unexpected": _ids(unexpected),
        "failed_but_read": _ids(failed_read),
        "duplicates": dups,
        "indeterminate": {"count": len(info), "read": len(info & read),
                          "unread": len(info - read)},
        "order": order,
        "overall": _overall(sends),
        "windows": _windows(h, sends, lost),
        "notes": list(h.notes),
    }
    problems = _problems(res, duplicates_allowed)
    return {"valid": not problems, "problems": problems, **res}


def lost_ids(h: History) -> set[str]:
    """Every acknowledged message the final drain did not read."""
    return {m for m, a in h.attempts.items() if a.outcome == "ok"} - _drained_ids(h)


def _drained_ids(h: History) -> set[str]:
    """What the final drain read (every read from its start on: the workload has stopped
    its other readers by then); without a drain, every read."""
    if h.drain is None or h.drain[0] is None:
        return {r.id for r in h.reads}
    return {r.id for r in h.reads if r.at >= h.drain[0]}


def drain_gaps(h: History) -> tuple[list[str], list[str]]:
    """Where the drain fell short: (unreached, short). Every (group, queue) that
    acknowledged a message must have been read to its end (else the drain did not finish:
    a group missing from the route must never pass for "drained, 0 read"), and that end
    should lie past its last acknowledged offset (else it reads short: said, and any
    acknowledged message it lost is counted lost)."""
    if h.drain_queues is None:
        return [], []  # a history from before the drain said what it read
    acked: dict[tuple[str, int], int] = {}
    for a in h.attempts.values():
        if a.outcome == "ok" and a.broker is not None and a.queue is not None:
            key = (a.broker, a.queue)
            acked[key] = max(acked.get(key, -1), a.offset if a.offset is not None else -1)
    unreached, short = [], []
    for (broker, queue), last in sorted(acked.items()):
        end = h.drain_queues.get((broker, queue))
        if end is None:
            unreached.append(f"{broker} queue {queue} acknowledged messages (up to offset "
                             f"{last}) but the drain never read it to its end (not in the "
                             "route, or unreadable)")
        elif end <= last:
            short.append(f"{broker} queue {queue} acknowledged up to offset {last} but "
                         f"its drain ended at offset {end} (offset {last} never read)")
    return unreached, short


def _ids(s: set) -> dict:
    return {"count": len(s), "ids": sorted(s)[:MAX_IDS]}


def _problems(r: dict, duplicates_allowed: bool) -> list[str]:
    out = []
    if not r["drained"]:
        out.append("the final drain did not finish: an unread acknowledged message cannot "
                   "be told lost")
        out += [f"drain: {g}" for g in r["drain_gaps"]["unreached"][:10]]

    def listed(name: str, what: str) -> None:
        if r[name]["count"]:
            ids = r[name]["ids"][:10]
            more = " ..." if r[name]["count"] > len(ids) else ""
            out.append(f"{r[name]['count']} {what}: {', '.join(ids)}{more}")
    listed("lost", "lost (acknowledged, not in the log at the end)")
    listed("unexpected", "unexpected (read, never sent)")
    listed("failed_but_read", "sends that failed were read anyway")
    d = r["duplicates"]
    if d["count"] and not duplicates_allowed:
        out.append(f"{d['count']} duplicate reads of {d['distinct']} messages "
                   f"({d['stored']} stored twice), which this mode rules out: "
                   f"{', '.join(d['ids'][:10])}")
    if r["order"]["inversions"]:
        ex = r["order"]["examples"][0]
        out.append(f"{r['order']['inversions']} orderly messages read out of order, e.g. "
                   f"key {ex['key']}: {ex['then']} read after {ex['first']} "
                   f"(queue {ex['queue']}, reader {ex['reader']})")
    for w in r["windows"]:
        if w["recovery_s"] is None:
            out.append(f"fault {w['name']} on {','.join(w['nodes'])} at {w['start']} s: "
                       "no acknowledged send after it")
    return out


def _duplicates(h: History, allowed: bool) -> dict:
    per_reader: Counter = Counter((r.reader, r.id) for r in h.reads)
    extra = sum(c - 1 for c in per_reader.values())
    twice = {m for (_, m), c in per_reader.items() if c > 1}
    positions: defaultdict[str, set] = defaultdict(set)
    for r in h.reads:
        if r.offset is not None:
            positions[r.id].add((r.topic, r.broker, r.queue, r.offset))
    stored = {m for m, p in positions.items() if len(p) > 1}
    return {"count": extra, "distinct": len(twice), "ids": sorted(twice)[:MAX_IDS],
            "stored": len(stored), "stored_ids": sorted(stored)[:MAX_IDS],
            "allowed": allowed}


def _order(h: History) -> dict:
    """Per reader and queue, each orderly key's first reads must follow its send order:
    message X read after Y is an inversion when X was acknowledged before Y was sent."""
    keys = {a.key for a in h.attempts.values() if a.orderly and a.outcome == "ok"}
    latest: dict[tuple, tuple[float, str]] = {}  # (stream, key) -> (latest invoke read, id)
    seen: set[tuple] = set()
    inversions, examples = 0, []
    for r in h.reads:
        a = h.attempts.get(r.id)
        if a is None or not a.orderly or a.outcome != "ok":
            continue
        stream = (r.reader, r.topic, r.broker, r.queue)
        if (stream, r.id) in seen:
            continue  # a redelivery: counted as a duplicate, not as an order inversion
        seen.add((stream, r.id))
        sk = (stream, a.key)
        prev = latest.get(sk)
        if prev is not None and a.completed < prev[0]:
            inversions += 1
            if len(examples) < 10:
                examples.append({"key": a.key, "first": prev[1], "then": a.id,
                                 "reader": r.reader, "queue": r.queue})
        if prev is None or a.invoked > prev[0]:
            latest[sk] = (a.invoked, a.id)
    return {"keys": len(keys), "inversions": inversions, "examples": examples}


class _Sends:
    """The attempts as arrays, sorted by invoke time, for the per-window figures."""

    def __init__(self, h: History):
        at = list(h.attempts.values())
        inv = np.array([a.invoked for a in at], dtype=float)
        done = np.array([np.nan if a.completed is None else a.completed for a in at],
                        dtype=float)
        outcome = np.array([a.outcome for a in at], dtype=object)
        order = np.argsort(inv, kind="stable")
        self.ids = [at[i].id for i in order]
        self.invoked, self.completed = inv[order], done[order]
        self.outcome = outcome[order]
        self.is_ok = self.outcome == "ok"
        # the earliest acknowledgement among sends invoked at or after each position
        acked = np.where(self.is_ok, self.completed, np.inf)
        self.first_ack_from = np.minimum.accumulate(acked[::-1])[::-1] if len(acked) else acked
        ends = [max((r.at for r in h.reads), default=0.0), *(t for t in h.drain or () if t)]
        ends += [f.start if f.end is None else f.end for f in h.faults]
        # the workload's last moment (for the overall rate) and the history's (an open
        # fault window ends there)
        self.last_send = float(max(inv.max(), np.nanmax(done, initial=0.0))) if len(inv) else 0.0
        self.end = float(max(ends + [self.last_send]))

    def recovery(self, since: float) -> float | None:
        i = int(np.searchsorted(self.invoked, since, side="left"))
        if i >= len(self.invoked) or not np.isfinite(self.first_ack_from[i]):
            return None
        return _r(self.first_ack_from[i] - since)

    def figures(self, start: float, end: float) -> dict:
        """Counts of sends invoked in [start, end), acknowledgements per second completed
        in it, latency percentiles of its acknowledged sends."""
        lo, hi = np.searchsorted(self.invoked, [start, end], side="left")
        out = self.outcome[lo:hi]
        ok = self.is_ok[lo:hi]
        lat = (self.completed[lo:hi] - self.invoked[lo:hi])[ok] * 1000.0
        acks = int(np.count_nonzero(self.is_ok & (self.completed >= start)
                                    & (self.completed < end)))
        span = end - start
        return {"attempts": int(hi - lo), "ok": int(np.count_nonzero(ok)),
                "fail": int(np.count_nonzero(out == "fail")),
                "info": int(np.count_nonzero(out == "info")),
                "throughput": _r(acks / span) if span > 0 else 0.0,
                "latency_ms": _latency(lat)}


def _latency(ms: np.ndarray) -> dict | None:
    if not len(ms):
        return None
    ps = np.percentile(ms, PERCENTILES)
    return {**{f"p{p}": _r(v) for p, v in zip(PERCENTILES, ps)}, "max": _r(ms.max())}


def _windows(h: History, s: _Sends, lost: set) -> list[dict]:
    lost_at = np.array(sorted(h.attempts[m].invoked for m in lost), dtype=float)
    out = []
    for f in h.faults:
        end = float(np.nextafter(s.end, np.inf)) if f.end is None else f.end  # open: all
        n_lost = int(np.count_nonzero((lost_at >= f.start) & (lost_at < end)))
        out.append({"name": f.name, "nodes": list(f.nodes), "start": _r(f.start),
                    "end": None if f.end is None else _r(f.end),
                    "recovery_s": s.recovery(f.start),
                    "recovery_after_heal_s": None if f.end is None else s.recovery(f.end),
                    "lost": n_lost, **s.figures(f.start, end)})
    return out


def _overall(s: _Sends) -> dict:
    start = float(s.invoked[0]) if len(s.invoked) else 0.0
    end = float(np.nextafter(s.last_send, np.inf))  # the last acknowledgement counts too
    return {"start": _r(start), "end": _r(s.last_send), **s.figures(start, end)}


def _r(x: float) -> float:
    return round(float(x), 6)


# ---- how long a window kept the groups it hit from serving (#34) -------------------
CONSUMERS = ("push", "pull")  # the workload's readers; the final drain is not a consumer


def group_recovery(h: History, start: float, groups: set[str]) -> float | None:
    """Seconds from `start` to the first acknowledgement, from one of `groups`, of a send
    invoked after it: how long the groups a fault hit took to take writes again (the
    checker's recovery counts any group's, and another group keeps writing)."""
    done = [a.completed for a in h.attempts.values() if a.outcome == "ok"
            and a.broker in groups and a.invoked >= start and a.completed is not None]
    return round(min(done) - start, 3) if done else None


def longest_gap(start: float, times: list[float], stop: float | None) -> float | None:
    """The longest stretch from `start` to `stop` without one of `times` (None: no stop,
    the groups never came back)."""
    if stop is None:
        return None
    points = [start, *sorted(t for t in times if start <= t <= stop), stop]
    return round(max(b - a for a, b in zip(points, points[1:])), 3)


def longest_outage(h: History, start: float, stop: float | None,
                   groups: set[str]) -> float | None:
    """The longest stretch from `start` to `stop` (the groups' first acknowledgement after
    the heal) in which none of `groups` acknowledged a send invoked after `start`: the
    outage a fault caused, also when it took effect late (a full disk is noticed at the
    next measure, a second later) or came back (a master handed over, then hit again)."""
    return longest_gap(start, [a.completed for a in h.attempts.values() if a.outcome == "ok"
                               and a.broker in groups and a.invoked >= start
                               and a.completed is not None], stop)


def _fresh_reads(h: History, start: float, groups: set[str]) -> list[float]:
    """When a consumer read, from one of `groups`, a message whose send began at or after
    `start` (an old message read again says nothing about new writes getting through)."""
    out = []
    for r in h.reads:
        a = h.attempts.get(r.id)
        if r.reader in CONSUMERS and r.broker in groups and a is not None \
                and a.invoked >= start:
            out.append(r.at)
    return out


def read_outage(h: History, start: float, end: float | None,
                groups: set[str]) -> float | None:
    """The longest stretch from `start` until a consumer read a message sent to `groups`
    after the heal (`end`), in which no consumer read a message sent to them after `start`:
    the consumer's side of the outage. None: never healed, or nothing sent after the heal
    was read before the run ended."""
    if end is None:
        return None
    after_heal = _fresh_reads(h, end, groups)
    stop = min(after_heal) if after_heal else None
    return longest_gap(start, _fresh_reads(h, start, groups), stop)


def window_recovery(h: History, start: float, end: float | None, groups: set[str]) -> dict:
    """Every recovery figure of one window (seconds; None: not reached)."""
    after_heal = None if end is None else group_recovery(h, end, groups)
    return {"group_recovery_s": group_recovery(h, start, groups),
            # (#34's "restart + 2 s", "heal + 2 s": from the window's end)
            "group_recovery_after_heal_s": after_heal,
            "group_outage_s": longest_outage(
                h, start, None if after_heal is None else end + after_heal, groups),
            "read_outage_s": read_outage(h, start, end, groups)}
