"""Chaos runs side by side (#34): one markdown row per results.json (`ledgermq chaos` or
`bench.rocketmq_chaos`), with each fault family's windows and the longest time from a
window's start to the first acknowledgement by a group it hit (and from its heal), then
lost / unexpected / duplicates / indeterminate of sent (and how many were refused).

    python -m bench.chaos_table chaos-results/*/results.json
"""
from __future__ import annotations

import json
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


def main(argv: list[str]) -> int:
    results = [json.loads(Path(p).read_text()) for p in argv]
    if not results:
        print(__doc__)
        return 2
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
