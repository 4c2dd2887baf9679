"""Chaos runs side by side (#34): one markdown row per results.json (`ledgermq chaos` or
`bench.rocketmq_chaos`), with each fault family's windows and the longest time from a
window's start to the first acknowledgement by a group it hit (and from its heal), then
lost / unexpected / duplicates / indeterminate of sent (and how many were refused).

    python -m bench.chaos_table chaos-results/*/results.json

With --targets: one row per mode, the windows of every seed by what they hit (a master or
a slave, as the window began) in #34's recovery-target columns, each with the longest
stretch without an acknowledgement by the groups hit (`group_outage_s`: from the window's
start to their first acknowledgement after the heal) and the longest without a consumer
reading what was sent to them (`read_outage_s`: until it reads a message sent after the
heal). A run recorded before `read_outage_s` existed gets it from the history.jsonl
beside its results.json.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FAMILIES = ["kill", "pause", "partition", "slow", "lost-writes", "corrupt", "disk-full",
            "combined"]


def _family(label: str) -> str:
    return label.split(":", 1)[0]


def worst(windows: list[dict], key: str) -> str:
    """The longest of `key` over `windows`: "1.3 s", or "never" (a window whose groups took
    no write again before the run ended)."""
    times = [w[key] for w in windows]
    return "never" if None in times else f"{max(times):.1f} s"


def row(res: dict, families: list[str]) -> str:
    by_family: dict[str, list[dict]] = {f: [] for f in families}
    for w in res["windows"]:
        by_family.setdefault(_family(w["name"]), []).append(w)
    a = res["check"]["attempts"]
    tail = f"{res['lost']} / {res['unexpected']} / {res['duplicates']} / " \
        f"{res['indeterminate']} of {a['total']:,} ({a['fail']:,} refused)"
    cells = [f"{len(ws)}x {worst(ws, 'group_recovery_s')} "
             f"({worst(ws, 'group_recovery_after_heal_s')} after the heal)" if ws else "—"
             for ws in (by_family[f] for f in families)]
    return "| " + " | ".join([res.get("system", "ledgermq"), res["mode"], str(res["seed"]),
                              *cells, tail]) + " |"


def table(results: list[dict]) -> str:
    present = {_family(w["name"]) for r in results for w in r["windows"]}
    families = [f for f in FAMILIES if f in present]
    head = ["system", "mode", "seed", *families,
            "lost / unexpected / dup / indeterminate of sent"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + [row(r, families) for r in results])


# #34's recovery targets: what a window hit, by the role of the broker it hit as it began
TARGETS = ["one slave / follower", "kill / pause of the master",
           "partition isolating the master", "lost writes / corruption on the master",
           "slow / full disk on the master", "combined",
           "a name server, controller or control node"]
_ON_MASTER = {"kill": 1, "pause": 1, "partition": 2, "lost-writes": 3, "corrupt": 3,
              "slow": 4, "disk-full": 4}


def target(w: dict) -> str | None:
    """The target column of a window (None: its run did not record the masters)."""
    fam, ev = _family(w["name"]), w["applied"]
    if fam == "combined":
        return TARGETS[5]
    if "masters" not in ev:
        return None
    brokers = [n for n in w["nodes"] if re.fullmatch(r"(?:[a-z]+-)?n\d+", n)]
    if not brokers:
        return TARGETS[6]
    # a group whose master went unseen (mid-failover, or its status call timed out)
    # counts as hit on the master: the stricter slave column takes only known slaves
    seen = {_group(m) for m in ev["masters"]}
    if set(brokers) & set(ev["masters"]) or ev.get("master") in brokers or \
            any(_group(b) not in seen for b in brokers):
        return TARGETS[_ON_MASTER[fam]]
    return TARGETS[0]


def _group(node: str) -> str:
    """The group of a broker by its layout name: a-n1 -> a (n1 -> "": one group)."""
    return node.split("-", 1)[0] if "-" in node else ""


OUTAGE, READ_OUTAGE = "group_outage_s", "read_outage_s"


def _cell(windows: list[dict]) -> str:
    """"21x 0.4 s / 1.1 s": windows, longest without an acknowledgement / without a read."""
    reads = f" / {worst(windows, READ_OUTAGE)}" if all(READ_OUTAGE in w for w in windows) \
        else ""
    return f"{len(windows)}x {worst(windows, OUTAGE)}{reads}"


def with_read_outages(res: dict, history: Path) -> dict:
    """`res` with each window's `read_outage_s` worked out from its run's history, when the
    run predates it."""
    if all(READ_OUTAGE in w for w in res["windows"]) or not history.exists():
        return res
    from ledgermq.chaos.history import load
    from ledgermq.chaos.checker import read_outage
    h = load(history)
    for w in res["windows"]:
        w[READ_OUTAGE] = read_outage(h, w["start"], w["end"], set(w["groups_hit"]))
    return res


def targets_table(results: list[dict]) -> str:
    """One row per mode: in each target column, the windows over every seed and the
    longest stretch in which the groups a window hit acknowledged nothing, from the
    window's start to their first acknowledgement after its heal, and in which no consumer
    read what was sent to them."""
    several = {r.get("system", "ledgermq") for r in results} != {"ledgermq"}
    head = (["system"] if several else []) + \
        ["mode", "seeds", *TARGETS, "lost / unexpected / duplicates of sent"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system, mode in dict.fromkeys((r.get("system", "ledgermq"), r["mode"])
                                      for r in results):
        runs = [r for r in results if (r.get("system", "ledgermq"), r["mode"]) == (system, mode)]
        cols: dict[str | None, list[dict]] = {}
        for r in runs:
            for w in r["windows"]:
                cols.setdefault(target(w), []).append(w)
        cells = [_cell(cols[t]) if t in cols else "—" for t in TARGETS]
        counts = " / ".join(str(sum(r[k] for r in runs))
                            for k in ("lost", "unexpected", "duplicates"))
        sent = sum(r["check"]["attempts"]["total"] for r in runs)
        seeds = ", ".join(str(r["seed"]) for r in runs)
        lines.append("| " + " | ".join(([system] if several else []) + [
            mode, seeds, *cells, f"{counts} of {sent:,}"]) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    by_target = "--targets" in argv
    results = [with_read_outages(json.loads(Path(p).read_text()), Path(p).parent /
                                 "history.jsonl") for p in argv if p != "--targets"]
    if not results:
        print(__doc__)
        return 2
    print(targets_table(results) if by_target else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
