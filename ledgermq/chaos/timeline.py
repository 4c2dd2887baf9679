"""timeline.png: what an operator would want to see of a chaos run. Above, acknowledged sends
per second (and failed / indeterminate ones); below, each send's latency by when it was sent;
both with the fault windows shaded and labelled, and the final drain marked.

Drawn with matplotlib's Agg canvas directly (no pyplot, no display, no global state).
matplotlib is the optional extra `ledgermq[chaos]`."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .history import History

WIDTH_PX, HEIGHT_PX, DPI = 1400, 800, 100
TINTS = {"kill": "#f6b8b8", "pause": "#f9d9a6", "partition": "#f4c6e4", "slow": "#c8dcf5",
         "lost-writes": "#f3a6a6", "corrupt": "#d9c3f0", "disk-full": "#c9ebc4"}
OTHER_TINT = "#dddddd"


def _mpl():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # the optional extra is not installed
        raise RuntimeError("timeline.png needs matplotlib: pip install 'ledgermq[chaos]'") from e
    return Figure, FigureCanvasAgg


def render(h: History, path: str | os.PathLike, *, bin_s: float | None = None) -> Path:
    """Draw `h` into the PNG at `path` (WIDTH_PX x HEIGHT_PX) and return the path."""
    path = Path(path)
    figure(h, bin_s=bin_s).savefig(path, dpi=DPI, format="png")
    return path


def figure(h: History, *, bin_s: float | None = None):
    """The timeline as a matplotlib Figure on an Agg canvas: axes (rate, latency)."""
    Figure, FigureCanvasAgg = _mpl()
    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    rate, lat = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1]})
    fig.suptitle(_title(h))
    a = list(h.attempts.values())
    inv = np.array([x.invoked for x in a], dtype=float)
    done = np.array([np.nan if x.completed is None else x.completed for x in a], dtype=float)
    outcome = np.array([x.outcome for x in a], dtype=object)
    span = _span(h, inv, done)
    step = bin_s or _step(span[1] - span[0])
    _rates(rate, inv, done, outcome, span, step)
    _latencies(lat, inv, done, outcome)
    for ax in (rate, lat):
        _faults(ax, h, span)
    _labels(rate, h)
    lat.set_xlabel("seconds since the run started")
    lat.set_xlim(*span)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.08, hspace=0.12)
    return fig


def _title(h: History) -> str:
    f = h.facts
    parts = [str(f["mode"]) if "mode" in f else "chaos run"]
    if "faults" in f:
        faults = f["faults"]
        parts.append(", ".join(faults) if isinstance(faults, list) else str(faults))
    if "seed" in f:
        parts.append(f"seed {f['seed']}")
    return " | ".join(parts)


def _span(h: History, inv: np.ndarray, done: np.ndarray) -> tuple[float, float]:
    ts = [0.0, *(t for t in h.drain or () if t is not None)]
    ts += [t for w in h.faults for t in (w.start, w.end) if t is not None]
    if len(inv):
        ts += [float(inv.max()), float(np.nanmax(done, initial=0.0))]
    end = max(ts)
    return 0.0, end if end > 0 else 1.0


def _step(seconds: float) -> float:
    """A round bin width giving at most ~150 bins (a round one, so a steady rate at a
    round interval draws flat instead of aliasing)."""
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60):
        if seconds / step <= 150:
            return float(step)
    return seconds / 150


def _rates(ax, inv, done, outcome, span, step) -> None:
    edges = np.arange(span[0], span[1] + step, step)
    for name, color, label in (("ok", "#1f5fa8", "acknowledged"),
                               ("fail", "#c0392b", "failed"),
                               ("info", "#e67e22", "indeterminate")):
        sel = outcome == name
        if name != "ok" and not sel.any():
            continue
        when = np.where(np.isnan(done[sel]), inv[sel], done[sel])  # in flight: when sent
        counts, _ = np.histogram(when, bins=edges)
        ax.step(edges[:-1], counts / step, where="post", color=color, lw=1.2, label=label)
    ax.set_ylabel("sends / s")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    if not len(inv):
        ax.text(0.5, 0.5, "no sends recorded", transform=ax.transAxes, ha="center")


def _latencies(ax, inv, done, outcome) -> None:
    ms = (done - inv) * 1000.0
    for name, color, marker, label in (("ok", "#1f5fa8", ".", "acknowledged"),
                                       ("fail", "#c0392b", "x", "failed"),
                                       ("info", "#e67e22", "x", "indeterminate")):
        sel = (outcome == name) & ~np.isnan(ms)
        if sel.any():
            ax.scatter(inv[sel], np.maximum(ms[sel], 0.01), s=3, c=color, marker=marker,
                       linewidths=0.6, label=label, rasterized=True)
    ax.set_yscale("log")
    ax.set_ylabel("send latency (ms)")
    if len(inv):
        ax.legend(loc="upper left", fontsize=8, markerscale=3, framealpha=0.9)


def _faults(ax, h: History, span) -> None:
    for w in h.faults:
        end = span[1] if w.end is None else w.end
        tint = TINTS.get(w.name.partition(":")[0], OTHER_TINT)
        ax.axvspan(w.start, end, color=tint, alpha=0.6, lw=0, zorder=0)
    if h.drain and h.drain[0] is not None:
        ax.axvline(h.drain[0], color="#555555", ls="--", lw=1, zorder=1)


def _labels(ax, h: History) -> None:
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for i, w in enumerate(h.faults):
        nodes = ",".join(w.nodes)
        ax.text(w.start, 1.01 + 0.045 * (i % 2), f"{w.name} {nodes}".strip(), transform=top,
                fontsize=8, va="bottom", ha="left", clip_on=False)
    if h.drain and h.drain[0] is not None:
        ax.text(h.drain[0], 0.97, " drain", transform=top, fontsize=8, va="top")
