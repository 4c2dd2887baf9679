"""Which pairs of test hosts a partition cuts apart: pure functions over host names, so
the shapes (Jepsen's and OpenChaos's) can be checked without a network.

A cut is a frozenset of two names; a pair that is cut cannot exchange a packet in either
direction. Hosts a fault does not name keep every link they had.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations

Cut = frozenset  # frozenset[str] of exactly two host names


def partition(groups: Iterable[Iterable[str]]) -> set[Cut]:
    """Hosts in different groups cannot talk; hosts in no group talk to everyone."""
    groups = [list(g) for g in groups]
    seen: set[str] = set()
    for g in groups:
        for h in g:
            if h in seen:
                raise ValueError(f"host {h} is in two groups of one partition")
            seen.add(h)
    return {Cut((a, b)) for g1, g2 in combinations(groups, 2) for a in g1 for b in g2}


def isolate(host: str, everyone: Iterable[str]) -> set[Cut]:
    """`host` alone on one side, every other host on the other."""
    return partition([[host], [h for h in everyone if h != host]])


def bridge(left: Iterable[str], right: Iterable[str], middle: str) -> set[Cut]:
    """Two halves that cannot talk to each other, both still talking to `middle`."""
    left, right = list(left), list(right)
    if middle in left or middle in right:
        raise ValueError(f"the bridge host {middle} must be in neither half")
    return partition([left, right])


def majorities_ring(ring: Sequence[str]) -> set[Cut]:
    """Every host sees a majority (itself and its nearest neighbours around `ring`) and no two
    hosts see the same majority: with 5 hosts each talks to its two ring neighbours only.
    The caller picks the ring's order (a seeded shuffle, for a replayable schedule)."""
    n = len(ring)
    if len(set(ring)) != n:
        raise ValueError(f"a ring names each host once, got {list(ring)}")
    if n < 4:
        raise ValueError(f"a majorities ring needs at least 4 hosts, got {n}")
    majority = n // 2 + 1
    reach = majority // 2  # neighbours seen on each side: 1 + 2 * reach >= majority
    return {Cut((ring[i], ring[j])) for i, j in combinations(range(n), 2)
            if min(j - i, n - (j - i)) > reach}
