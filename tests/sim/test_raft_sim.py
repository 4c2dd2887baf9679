"""The simulator: the protocol survives 120 seeds of faults, and every known bug is caught
by the invariant it breaks."""
import pytest

from ledgermq.replication.raft import (
    BUGS, Entry, RaftNode, Role, Send, VoteRequest, VoteResponse,
)
from ledgermq.sim import PROFILES, RaftSim
from ledgermq.sim.raft_checker import Checker
from ledgermq.sim.result import Violation

SEEDS = 120  # (make sim-long: 2,000)
BUG_SEED_BOUND = 300
BUG_BREAKS = {
    "commit-old-term": "state-machine-safety",
    "commit-past-end": "commit-within-log",
    "truncate-to-commit": "log-matching",
    "vote-by-current-term": "leader-completeness",
    "vote-with-lost-entries": "leader-completeness",
}


def test_raft_survives_random_faults():
    failures = []
    for seed in range(SEEDS):
        r = RaftSim(seed, steps=3000).run()
        if not r.ok:
            failures.append((seed, r.invariant, r.violation, "\n".join(r.tail(20))))
    assert not failures, failures[0]


def test_raft_survives_worst_moment_faults():
    for seed in range(100):
        r = RaftSim(seed, steps=3000, profile=PROFILES["nemesis"]).run()
        assert r.ok, (seed, r.invariant, r.violation, "\n".join(r.tail(20)))


def test_every_bug_names_its_invariant():
    assert set(BUG_BREAKS) == set(BUGS)
    assert set(BUG_BREAKS.values()) <= set(RaftSim.INVARIANTS)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_checker_catches_known_bug(bug):
    for seed in range(BUG_SEED_BOUND):
        r = RaftSim(seed, steps=3000, bugs=[bug], profile=PROFILES["nemesis"]).run()
        if not r.ok:
            assert r.invariant == BUG_BREAKS[bug], (seed, r.invariant, r.violation)
            again = RaftSim(seed, steps=3000, bugs=[bug], profile=PROFILES["nemesis"]).run()
            assert again.trace == r.trace  # the failing seed replays exactly
            return
    pytest.fail(f"{bug} went unnoticed for {BUG_SEED_BOUND} seeds")


CORRUPTION_SEEDS = 60


def test_a_minority_node_whose_disk_lost_acknowledged_entries_is_repaired_safely():
    """Disk corruption on a minority node (issue #17): a follower's synced tail is cut on
    restart, often with the leader killed at once. No acknowledged entry is lost (every
    invariant holds, leader-completeness above all) and the group commits again once the
    faults heal (liveness)."""
    hit = 0
    for seed in range(CORRUPTION_SEEDS):
        r = RaftSim(seed, steps=3000, profile=PROFILES["nemesis"]).run()
        assert r.ok, (seed, r.invariant, r.violation, "\n".join(r.tail(20)))
        hit += r.stats["corruptions"] > 0
    assert hit >= CORRUPTION_SEEDS // 2, hit  # the fault really ran


def test_a_node_that_lost_entries_votes_by_the_log_it_had():
    """n0 held entries 0..5 (term 2), its disk kept 0..2: it grants a vote only to a
    candidate at least as up to date as (2, 5), and does not campaign itself."""
    log = [Entry(i, 1 if i < 3 else 2, b"e%d" % i) for i in range(3)]
    n0 = RaftNode("n0", ["n0", "n1", "n2"], term=2, log=log, promised=(2, 5))
    behind = n0.step(VoteRequest("n1", "n0", 3, 4, 2), 0)
    assert [a.msg.granted for a in behind if isinstance(a, Send)] == [False]
    ahead = n0.step(VoteRequest("n2", "n0", 3, 5, 2), 0)
    assert [a.msg.granted for a in ahead if isinstance(a, Send)] == [True]
    quiet = n0.tick(10**6)  # its election timeout passed long ago
    assert not [a for a in quiet if isinstance(a, Send)]
    assert n0.role is Role.FOLLOWER


def test_a_pre_vote_refused_at_a_later_term_takes_that_term():
    """The longest log with an older term must still be able to win: a pre-vote refused
    by a node of a later term raises ours, so the next pre-vote asks for a grantable term."""
    n1 = RaftNode("n1", ["n0", "n1", "n2"], term=13, log=[Entry(0, 13, b"x")])
    n1.step(VoteResponse("n0", "n1", 14, False, pre_vote=True), 0)
    assert n1.term == 14


QUORUM_ACK_SEEDS = 60


def test_a_leader_that_loses_its_appends_reaches_the_quorum_ack_timeout_safely():
    """The fault "a leader keeps a quorum of heartbeats but its appends are lost" leaves
    it leading while no follower acknowledges: client appends answer
    WAIT_QUORUM_ACK_TIMEOUT (counted by the simulator), are never taken for acknowledged,
    may commit later, and every invariant holds."""
    reached = []
    for seed in range(QUORUM_ACK_SEEDS):
        r = RaftSim(seed, steps=3000).run()
        assert r.ok, (seed, r.invariant, r.violation, "\n".join(r.tail(20)))
        if r.stats["quorum_ack_timeouts"]:
            reached.append(seed)
    assert len(reached) >= QUORUM_ACK_SEEDS // 10, reached


def committed_on_n0(checker, entries, term=1):
    ids = ["n0", "n1", "n2"]
    n0 = RaftNode("n0", ids, term=term, log=list(entries), commit=entries[-1].index)
    checker.load("n0", entries)
    checker.check_node(n0, 1)
    return ids


def test_log_matching_is_checked_on_a_log_that_starts_past_a_compaction():
    """A node restarted with a compacted log (its first entry a committed one) is chained
    from that entry: an entry there that follows another prefix is caught."""
    c = Checker()
    a = [Entry(i, 1, b"a%d" % i) for i in range(4)]
    committed_on_n0(c, a[:3])
    c.appended("n0", a[3:])  # (3, term 1) follows a0..a2 on n0
    c.load("n1", a[2:3])  # n1 compacted through 1 and restarted
    with pytest.raises(Violation) as v:
        c.appended("n1", [Entry(3, 1, b"other")])
    assert v.value.invariant == "log-matching"


def test_a_later_leader_lacking_an_entry_committed_in_its_own_term_is_caught():
    c = Checker()
    ids = committed_on_n0(c, [Entry(0, 1, b""), Entry(1, 1, b"x")])
    stale = RaftNode("n1", ids, term=2, log=[Entry(0, 1, b"")])
    stale.role = Role.LEADER
    with pytest.raises(Violation) as v:
        c.became_leader(stale)
    assert v.value.invariant == "leader-completeness"
