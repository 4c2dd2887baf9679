"""The Raft core on its own: a tiny in-memory harness delivering messages in order."""
import random

from ledgermq.replication.raft import (
    Code, Complete, Entry, Push, PushType, RaftConfig, RaftNode,
    Role, SaveMeta, Send, VoteRequest,
)

from .raft_harness import CFG, Harness


def test_single_node_commits_at_once():
    n = RaftNode("solo", ["solo"], CFG, rng=random.Random(1))
    n.tick(1000)
    assert n.role is Role.LEADER
    out = n.propose(7, b"x", 1000)
    assert Complete(7, Code.SUCCESS, n.end, n.term) in out


def test_election_replication_and_follower_commit():
    h = Harness()
    h.run(1000)
    leader = h.leader()
    assert leader is not None
    for i in range(20):
        h.apply(leader.propose(i, b"m%d" % i, h.now))
    h.run(200)
    assert all(h.done[i].code is Code.SUCCESS for i in range(20))
    for n in h.nodes.values():
        assert n.commit == leader.commit == leader.end
        assert n.entries(0, n.end) == leader.entries(0, leader.end)


def test_vote_is_persisted_before_it_is_answered():
    n = RaftNode("a", ["a", "b", "c"], CFG)
    out = n.step(VoteRequest("b", "a", 1, -1, 0), 0)
    kinds = [type(a).__name__ for a in out]
    assert kinds.index("SaveMeta") < kinds.index("Send")
    assert out[-1].msg.granted and SaveMeta(1, "b") in out


def test_up_to_date_check_uses_the_last_entry_term():
    n = RaftNode("a", ["a", "b", "c"], CFG, term=5, log=[Entry(0, 3, b"x")])
    stale = n.step(VoteRequest("b", "a", 9, 5, 2), 0)  # longer log, older last term
    assert not stale[-1].msg.granted
    fresh = n.step(VoteRequest("c", "a", 10, 0, 3), 0)
    assert fresh[-1].msg.granted


def test_prevote_keeps_a_rejoining_node_from_deposing_the_leader():
    h = Harness()
    h.run(1000)
    leader = h.leader()
    follower = next(n for n in h.nodes.values() if n is not leader)
    h.cut = {follower.id}
    h.run(2000)  # the cut-off node keeps timing out, pre-voting only
    assert follower.term == leader.term
    h.cut = set()
    h.run(500)
    assert h.leader() is leader and follower.leader == leader.id


def test_leadership_transfer():
    h = Harness()
    h.run(1000)
    leader = h.leader()
    target = next(n for n in h.nodes.values() if n is not leader)
    h.apply(leader.transfer_leadership(target.id, h.now))
    h.run(300)
    assert h.leader() is target


def test_a_transfer_to_a_peer_that_never_takes_over_is_given_up():
    h = Harness()
    h.run(1000)
    leader = h.leader()
    target = next(n for n in h.nodes.values() if n is not leader)
    h.cut.add(target.id)  # its TimeoutNow is lost: it cannot take over
    h.apply(leader.transfer_leadership(target.id, h.now))
    h.apply(leader.propose(1, b"refused", h.now))
    assert h.done[1].code is Code.NOT_LEADER  # writes wait while a transfer is on
    h.run(2 * CFG.election_timeout_ms + 100)
    assert h.leader() is leader and leader.transfer_to is None
    h.apply(leader.propose(2, b"served", h.now))
    h.run(200)
    assert h.done[2].code is Code.SUCCESS


def test_follower_push_handling():
    f = RaftNode("f", ["f", "l", "x"], CFG, term=1)
    e = [Entry(i, 1, b"e%d" % i) for i in range(4)]

    def push(index, entries, prev=-1, kind=PushType.APPEND):
        return Push("l", "f", 1, kind, index, tuple(entries), -1, prev)

    def code(out):
        return [a.msg.code for a in out if isinstance(a, Send)][-1]
    assert code(f.step(push(0, e[:2]), 0)) is Code.SUCCESS
    assert code(f.step(push(0, e[:2]), 1)) is Code.SUCCESS  # lost ack: same entries
    changed = [Entry(1, 1, b"other")]  # an uncommitted conflicting tail is replaced
    assert code(f.step(push(1, changed, 1), 2)) is Code.SUCCESS and f.entry(1) == changed[0]
    f.step(Push("l", "f", 1, PushType.COMMIT, -1, (), 1, -1), 3)
    assert f.commit == 1
    # now committed: a different entry there can only be our damaged copy (the leader of
    # our term holds every committed entry), so the leader's replaces it
    third = Entry(1, 1, b"third")
    assert code(f.step(push(1, [third], 1), 4)) is Code.SUCCESS and f.entry(1) == third
    assert f.commit == 1
    f.step(push(2, [Entry(2, 1, b"e2")], 1), 5)
    f.step(Push("l", "f", 1, PushType.COMMIT, -1, (), 2, -1), 5)
    assert f.commit == 2  # a replacement that would leave the log short of it: refused
    assert code(f.step(push(1, [Entry(1, 1, b"fourth")], 1), 6)) is Code.INCONSISTENT_STATE
    assert f.entry(1) == third and f.end == 2

    f2 = RaftNode("f", ["f", "l", "x"], CFG, term=1)
    f2.step(push(0, e[:1]), 0)
    assert not [a for a in f2.step(push(2, e[2:3], 1), 0) if isinstance(a, Send)]  # gap: held
    dup = f2.step(push(2, e[2:3], 1), 10)
    assert code(dup) is Code.REPEATED_PUSH
    late = f2.tick(10 + CFG.max_push_timeout_ms)
    assert code(late) is Code.INCONSISTENT_STATE  # the gap outlived the push timeout
    out = f2.step(push(1, e[1:3], 1), 200)
    assert code(out) is Code.SUCCESS and f2.end == 2


def test_commit_is_clamped_and_never_moves_back():
    f = RaftNode("f", ["f", "l", "x"], CFG, term=1)
    f.step(Push("l", "f", 1, PushType.APPEND, 0, (Entry(0, 1, b"a"),), 50, -1), 0)
    assert f.commit == 0  # the leader's 50 clamped to what we hold
    f.step(Push("l", "f", 1, PushType.COMMIT, -1, (), -1, -1), 1)
    assert f.commit == 0


def test_client_answers():
    h = Harness()
    h.run(1000)
    leader = h.leader()
    follower = next(n for n in h.nodes.values() if n is not leader)
    assert follower.propose(1, b"x", h.now) == [Complete(1, Code.NOT_LEADER)]
    h.cut = {n.id for n in h.nodes.values() if n is not leader}
    h.apply(leader.propose(2, b"lonely", h.now))
    h.run(CFG.quorum_ack_timeout_ms + 50)
    assert h.done[2].code in (Code.WAIT_QUORUM_ACK_TIMEOUT, Code.TERM_CHANGED)


def test_a_far_behind_follower_is_fed_under_the_quota():
    cfg = RaftConfig(election_timeout_ms=100, heartbeat_ms=20, max_batch_entries=1,
                     max_pending_size=1000, peer_push_quota=10_000,
                     peer_push_throttle_point=20_000)
    leader = RaftNode("l", ["l", "f", "g"], cfg, term=1,
                      log=[Entry(i, 1, b"x" * 1000) for i in range(100)], rng=random.Random(1))
    leader.tick(1000)  # pre-vote; fake the votes to make it leader
    leader._start_election(1000, [])
    leader._become_leader(1000, [])
    d = leader.dispatchers["f"]
    d.set_state(PushType.APPEND, -1)  # as if COMPARE found an empty follower
    out = []
    leader._dispatch("f", 1000, out)
    pushed = sum(len(a.msg.entries[0].data) for a in out if isinstance(a, Send) and
                 a.msg.kind is PushType.APPEND)
    assert 10_000 <= pushed <= 11_000  # one second's quota, not the whole 100 KB
    out = []
    leader._dispatch("f", 2000, out)  # the next second: the next slice
    assert any(isinstance(a, Send) and a.msg.kind is PushType.APPEND for a in out)


def test_pushes_to_a_follower_far_behind_stay_within_max_push_bytes():
    """A follower that lost its log comes back to many large entries: every push carries
    at most max_push_bytes of entries (or a single larger entry), and it catches up."""
    from dataclasses import replace
    cfg = replace(CFG, max_push_bytes=10_000)
    ids = ["n0", "n1", "n2"]
    h = Harness()
    h.nodes = {i: RaftNode(i, ids, cfg, rng=random.Random(f"7{i}")) for i in ids}
    h.run(1000)
    leader = h.leader()
    away = next(i for i in ids if i != leader.id)
    h.cut.add(away)
    sizes = [3000] * 30 + [25_000] + [3000] * 10  # one entry larger than a push
    for rid, size in enumerate(sizes):
        h.apply(leader.propose(rid, bytes(size), h.now))
    h.run(300)
    # it comes back with an empty log (a replaced disk): the leader compares, then appends
    # from the start in pushes of up to max_batch_entries entries
    h.nodes[away] = RaftNode(away, ids, cfg, rng=random.Random(9))
    pushes = []
    original_step = h.nodes[away].step

    def step(m, now):
        if isinstance(m, Push) and m.entries:
            pushes.append(sum(len(e.data) for e in m.entries))
        return original_step(m, now)
    h.nodes[away].step = step
    h.cut.discard(away)
    h.run(3000)
    assert h.nodes[away].end == leader.end and h.nodes[away].commit == leader.commit
    assert pushes and all(b <= 10_000 or b == 25_000 for b in pushes), pushes
    assert max(pushes) == 25_000  # the large entry travelled alone


def test_a_follower_that_lost_its_log_catches_up_from_behind_a_gap():
    """The leader's appends land past the follower's (empty) end and wait in its queue,
    through heartbeats; once the gap outlives the push timeout the follower answers
    INCONSISTENT_STATE and the leader compares and refills it."""
    h = Harness()
    h.run(1000)
    leader = h.leader()
    away = next(i for i in h.nodes if i != leader.id)
    h.cut.add(away)
    for rid in range(10):
        h.apply(leader.propose(rid, b"e%d" % rid, h.now))
    h.run(200)
    assert CFG.heartbeat_ms < CFG.max_push_timeout_ms
    h.nodes[away] = RaftNode(away, list(h.nodes), CFG, rng=random.Random(5))  # empty log
    h.cut.discard(away)
    h.run(1000)
    assert h.nodes[away].end == leader.end
    assert h.nodes[away].entries(0, leader.end) == leader.entries(0, leader.end)


def test_a_follower_that_lost_acknowledged_entries_is_refilled_from_heartbeats_alone():
    """Everything was pushed and acknowledged, nothing is in flight; the follower comes
    back with an empty log. Only COMMIT heartbeats reach it; its answer shows it holds less
    than it acknowledged, so the leader compares and refills it."""
    h = Harness()
    h.run(1000)
    leader = h.leader()
    for rid in range(10):
        h.apply(leader.propose(rid, b"e%d" % rid, h.now))
    h.run(300)
    away = next(i for i in h.nodes if i != leader.id)
    assert h.nodes[away].end == leader.end and not leader.dispatchers[away].pending
    h.nodes[away] = RaftNode(away, list(h.nodes), CFG, rng=random.Random(5))  # empty log
    h.run(1000)
    assert h.nodes[away].end == leader.end
    assert h.nodes[away].entries(0, leader.end) == leader.entries(0, leader.end)


def test_a_follower_behind_the_leaders_compacted_log_restarts_at_its_first_entry():
    """While a follower was away, the others compacted their logs past what it holds
    (retention deleted the bytes). The leader keeps the group committing, then resets the
    follower's log to its first entry and refills it from there."""
    h = Harness()
    h.run(1000)
    leader = h.leader()
    away = next(i for i in h.nodes if i != leader.id)
    for rid in range(5):
        h.apply(leader.propose(rid, b"a%d" % rid, h.now))
    h.run(300)
    held = h.nodes[away].end
    h.cut.add(away)
    for rid in range(5, 40):
        h.apply(leader.propose(rid, b"b%d" % rid, h.now))
    h.run(300)
    for n in h.nodes.values():
        if n.id != away:
            n.log.compact_through(leader.end - 10)
    assert leader.begin > held + 1  # the entries it needs next are gone
    h.cut.discard(away)
    for rid in range(40, 50):
        h.apply(leader.propose(rid, b"c%d" % rid, h.now))
    h.run(1000)
    assert all(h.done[rid].code is Code.SUCCESS for rid in range(50))
    follower = h.nodes[away]
    assert follower.begin == leader.begin and follower.end == leader.end
    assert follower.entries(follower.begin, follower.end) == \
        leader.entries(leader.begin, leader.end)
    assert follower.commit == leader.commit


def test_an_append_no_quorum_acknowledges_in_time_answers_wait_quorum_ack_timeout():
    """The followers hear the leader's heartbeats (so check-quorum keeps it leading) but
    none of its appends: the client's append answers WAIT_QUORUM_ACK_TIMEOUT once
    quorum_ack_timeout_ms have passed, not before, from a leader still in place. The
    entry stays in the leader's log and commits once appends flow again."""
    h = Harness()
    h.run(1000)
    leader = h.leader()
    term = leader.term
    h.drop = lambda m: isinstance(m, Push) and m.kind is PushType.APPEND
    h.apply(leader.propose(1, b"unacked", h.now))
    index, asked = leader.end, h.now
    assert h.run(2 * CFG.quorum_ack_timeout_ms, until=lambda: 1 in h.done)
    assert h.done[1].code is Code.WAIT_QUORUM_ACK_TIMEOUT and h.done[1].index == index
    assert asked + CFG.quorum_ack_timeout_ms <= h.now <= asked + CFG.quorum_ack_timeout_ms + 10
    assert h.leader() is leader and leader.term == term and leader.commit < index
    h.drop = lambda m: False
    h.run(300)
    assert leader.commit >= index and all(n.entry(index) == leader.entry(index)
                                          for n in h.nodes.values())


def test_a_follower_whose_last_committed_entry_came_back_damaged_is_repaired():
    """Recovery cut a follower's log where CRCs failed, but the damage began a few bytes
    earlier, in the last message it kept, where the body CRC does not reach (topic and
    properties): that entry reads back different from the leader's although the follower
    holds it as committed. The leader is killed at once; the new one needs the damaged
    node's acknowledgements, so it must replace that entry rather than be refused forever."""
    h = Harness()
    h.run(1000)
    leader = h.leader()
    for rid in range(10):
        h.apply(leader.propose(rid, b"e%d" % rid, h.now))
    h.run(300)
    damaged = next(i for i in h.nodes if i != leader.id)
    good = h.nodes[damaged]
    assert good.end == leader.end and good.commit == leader.commit
    kept = good.end - 4  # recovery cut the tail; the last entry it kept is damaged
    last = good.entry(kept)
    log = list(good.entries(0, kept - 1)) + [Entry(kept, last.term, last.data[:-1] + b"\0")]
    h.nodes[damaged] = RaftNode(damaged, list(h.nodes), CFG, term=good.term, log=log,
                                commit=good.commit, rng=random.Random(5),
                                promised=(good.last_term, good.end), now=h.now)
    assert h.nodes[damaged].commit == kept  # its saved commit, clamped to what it holds
    h.cut.add(leader.id)  # the old leader dies at once: the damaged node is needed
    assert h.run(2000, until=lambda: h.leader() is not None)
    new = h.leader()
    for rid in range(10, 15):
        h.apply(new.propose(rid, b"f%d" % rid, h.now))
    h.run(1000)
    assert all(h.done[rid].code is Code.SUCCESS for rid in range(10, 15)), \
        {rid: h.done.get(rid) for rid in range(10, 15)}
    follower = h.nodes[damaged]
    assert follower.entries(0, follower.end) == new.entries(0, new.end)
    assert follower.commit == new.commit
