"""The shapes of the partitions (which host pairs each fault cuts), checked without a
network: the test-host tests then show that a cut pair really cannot talk."""
import pytest

from ledgermq.chaos import cuts


def pair(a, b):
    return frozenset((a, b))


def sees(host, hosts, cut):
    return {h for h in hosts if h == host or pair(host, h) not in cut}


def test_partition_cuts_every_pair_across_groups_and_spares_unnamed_hosts():
    got = cuts.partition([["a"], ["b", "c"]])
    assert got == {pair("a", "b"), pair("a", "c")}
    assert cuts.partition([["a", "b"], ["c", "d"]]) == {
        pair("a", "c"), pair("a", "d"), pair("b", "c"), pair("b", "d")}
    assert cuts.partition([["a"], ["b"]]) == {pair("a", "b")}  # "e" elsewhere keeps its links
    with pytest.raises(ValueError, match="host a is in two groups"):
        cuts.partition([["a", "b"], ["a"]])


def test_isolate_cuts_one_host_from_all_others():
    assert cuts.isolate("b", ["a", "b", "c"]) == {pair("b", "a"), pair("b", "c")}


def test_bridge_halves_cannot_talk_but_both_talk_to_the_middle():
    got = cuts.bridge(["a", "b"], ["d", "e"], "c")
    assert got == {pair(x, y) for x in "ab" for y in "de"}
    assert all("c" not in p for p in got)
    with pytest.raises(ValueError, match="bridge host c must be in neither half"):
        cuts.bridge(["a", "c"], ["d"], "c")


@pytest.mark.parametrize("n", range(4, 10))
def test_majorities_ring_every_host_sees_a_majority_and_no_two_the_same(n):
    hosts = [f"n{i}" for i in range(n)]
    cut = cuts.majorities_ring(hosts)
    views = [frozenset(sees(h, hosts, cut)) for h in hosts]
    assert all(len(v) >= n // 2 + 1 for v in views), views
    assert len(set(views)) == n, "two hosts see the same majority"
    assert all(len(v) < n for v in views), "a ring where someone sees everyone cuts too little"


def test_majorities_ring_of_five_links_each_host_to_its_ring_neighbours():
    cut = cuts.majorities_ring(["a", "b", "c", "d", "e"])
    assert sees("a", "abcde", cut) == {"e", "a", "b"}
    assert sees("c", "abcde", cut) == {"b", "c", "d"}


def test_a_ring_needs_four_distinct_hosts():
    with pytest.raises(ValueError, match="at least 4 hosts, got 3"):
        cuts.majorities_ring(["a", "b", "c"])
    with pytest.raises(ValueError, match="each host once"):
        cuts.majorities_ring(["a", "b", "c", "a"])
