"""Epochs of a commit log and the handshake truncation (S1-4, S1-5), as pure functions.

An epoch list is `[(epoch, start offset), ...]`, oldest first: each master term appends
`<newEpoch, its max offset>` when it takes over, so epoch e covers [start_e, start_e+1)
and the last one runs to the log's end.
"""
from __future__ import annotations

BUGS = {
    "truncate-to-own-max": "a slave keeps everything up to its own max offset instead of "
                           "cutting where its epochs and the master's part",
}


def epoch_ranges(epochs: list[tuple[int, int]], log_end: int) -> dict[int, tuple[int, int]]:
    """{epoch: (start, end)} of an epoch list over a log that ends at `log_end`."""
    out = {}
    for i, (epoch, start) in enumerate(epochs):
        end = epochs[i + 1][1] if i + 1 < len(epochs) else log_end
        out[epoch] = (start, max(start, end))
    return out


def truncate_point(slave: list[tuple[int, int]], slave_end: int,
                   master: list[tuple[int, int]], master_end: int,
                   bug: str | None = None) -> int | None:
    """Where a slave must cut its log before copying the master's (S1-5): walk the slave's
    epochs newest to oldest; the first one the master has with the same start offset gives
    min(the slave's end of it, the master's end of it). None: nothing in common, the slave
    starts over."""
    if bug == "truncate-to-own-max":
        return slave_end
    theirs = epoch_ranges(master, master_end)
    for epoch, (start, end) in sorted(epoch_ranges(slave, slave_end).items(), reverse=True):
        other = theirs.get(epoch)
        if other is not None and other[0] == start:
            return min(end, other[1])
    return None
