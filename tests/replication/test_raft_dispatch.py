"""The leader's dispatchers and the follower's entry handler: COMPARE that meets the
follower at its end skips TRUNCATE; heartbeats keep a follower's queued out-of-order
appends; a lost push is pushed again after max_push_timeout_ms; the leak check frees the
pipeline of pushes whose answers were lost but which a later answer covers (S0-5)."""
import random
from dataclasses import replace

from ledgermq.replication.raft import (
    Code, Entry, Push, PushResponse, PushType, RaftNode, Send,
)

from .raft_harness import CFG, Harness


def pushes(h, kind, dst=None):
    return [m for _, m in h.sent if isinstance(m, Push) and m.kind is kind and
            (dst is None or m.dst == dst)]


def test_a_compare_that_matches_at_the_followers_end_goes_straight_to_append():
    """A new leader meets a follower that holds exactly a prefix of its log: COMPARE finds
    the match at the follower's end, so nothing is left to truncate and the leader
    appends at once. A follower with a stale tail past the match still gets a TRUNCATE."""
    ids = ["n0", "n1", "n2"]
    common = [Entry(i, 1, b"c%d" % i) for i in range(5)]
    logs = {"n0": common + [Entry(5, 2, b"t2")],
            "n1": common + [Entry(5, 2, b"t2")],
            "n2": common + [Entry(5, 1, b"stale"), Entry(6, 1, b"stale")]}
    h = Harness()
    h.nodes = {i: RaftNode(i, ids, CFG, term=2, log=list(logs[i]),
                           rng=random.Random(f"3{i}")) for i in ids}

    def settled():
        leader = h.leader()
        return leader is not None and leader.id != "n2" and all(
            n.entries(0, n.end) == leader.entries(0, leader.end) for n in h.nodes.values())
    assert h.run(2000, until=settled)
    leader = h.leader()
    clean = "n1" if leader.id == "n0" else "n0"
    assert pushes(h, PushType.COMPARE, clean)  # it did compare
    assert pushes(h, PushType.TRUNCATE, clean) == []  # ... and needed no truncation
    truncates = pushes(h, PushType.TRUNCATE, "n2")
    assert [m.index for m in truncates] == [4]  # the stale tail is cut after the match


def follower_with(entries):
    f = RaftNode("f", ["f", "l", "x"], CFG, term=1)
    for e in entries:
        f.step(Push("l", "f", 1, PushType.APPEND, e.index, (e,), -1, -1), 0)
    return f


def answers(out):
    return [(a.msg.index, a.msg.code) for a in out
            if isinstance(a, Send) and isinstance(a.msg, PushResponse)]


def test_a_heartbeat_keeps_the_followers_queued_out_of_order_appends():
    """S0-7: appends past a gap wait for the missing one; a COMMIT heartbeat in between
    leaves them queued, so the missing push alone completes the follower's log (no
    re-push of the queued ones needed). COMPARE and TRUNCATE still clear the queue."""
    e = [Entry(i, 1, b"e%d" % i) for i in range(4)]
    f = follower_with(e[:1])
    assert answers(f.step(Push("l", "f", 1, PushType.APPEND, 2, (e[2],), 0, 1), 10)) == []
    f.step(Push("l", "f", 1, PushType.COMMIT, -1, (), 0, -1), 20)  # a heartbeat
    out = f.step(Push("l", "f", 1, PushType.APPEND, 1, (e[1],), 0, 1), 30)
    assert answers(out) == [(1, Code.SUCCESS), (2, Code.SUCCESS)]
    assert f.end == 2 and f.entries(0, 2) == tuple(e[:3])

    for control in (PushType.COMPARE, PushType.TRUNCATE):
        g = follower_with(e[:1])
        g.step(Push("l", "f", 1, PushType.APPEND, 2, (e[2],), 0, 1), 10)
        g.step(Push("l", "f", 1, control, 0, (e[0],), 0, -1), 20)
        out = g.step(Push("l", "f", 1, PushType.APPEND, 1, (e[1],), 0, 1), 30)
        assert answers(out) == [(1, Code.SUCCESS)] and g.end == 1, control


def lose_once(h, pick):
    """Lose the first message `pick` chooses (a network losing one packet)."""
    lost = []

    def drop(m):
        if not lost and pick(m):
            lost.append(m)
            return True
        return False
    h.drop = drop
    return lost


def test_a_lost_push_is_pushed_again_after_the_push_timeout():
    """The push carrying a new entry to one follower is lost, and nothing after it shows
    the follower a gap (heartbeats do not: a push is still in flight). The leader pushes
    it again once max_push_timeout_ms have passed, not before, and the follower catches
    up within a tick of that."""
    h = Harness()
    h.run(1000)
    leader = h.leader()
    away = next(i for i in h.nodes if i != leader.id)
    lost = lose_once(h, lambda m: isinstance(m, Push) and m.kind is PushType.APPEND and
                     m.dst == away)
    h.apply(leader.propose(1, b"once lost", h.now))
    index, sent = leader.end, h.now
    assert lost and lost[0].index == index
    assert h.run(1000, until=lambda: h.nodes[away].end == index)
    caught_up = h.now
    again = [(t, m) for t, m in h.sent if isinstance(m, Push) and m.dst == away and
             m.kind is PushType.APPEND and m.index == index][1:]
    assert again, "never pushed again"
    assert sent + CFG.max_push_timeout_ms <= again[0][0] <= caught_up
    assert caught_up <= sent + CFG.max_push_timeout_ms + 10
    assert h.nodes[away].entry(index) == leader.entry(index)


def test_the_leak_check_frees_a_full_pipeline_of_pushes_a_later_answer_covers():
    """Two pushes in flight at most, and re-pushes only after a long timeout. The answers
    to two of a follower's pushes are lost, but a later push's answer covers the first:
    the leak check drops it from the full pipeline, so the follower keeps receiving new
    entries at once (no push is sent twice) instead of stalling for the push timeout."""
    cfg = replace(CFG, max_pending_size=2, max_batch_entries=1, max_push_timeout_ms=1000,
                  quorum_ack_timeout_ms=3000)
    h = Harness(cfg=cfg)
    h.run(1000)
    leader = h.leader()
    away = next(i for i in h.nodes if i != leader.id)
    first = leader.end + 1
    lost_answers = {first, first + 2}

    def drop(m):
        if isinstance(m, PushResponse) and m.src == away and m.kind is PushType.APPEND \
                and m.index in lost_answers:
            lost_answers.discard(m.index)
            return True
        return False
    h.drop = drop
    h.sent.clear()
    for rid in range(8):
        h.apply(leader.propose(rid, b"e%d" % rid, h.now))
    # within 300 ms: well before a re-push (after 1000 ms) could have helped
    assert h.run(300, until=lambda: h.nodes[away].end == leader.end)
    assert not lost_answers  # both answers were lost
    pushed = [m.index for _, m in h.sent if isinstance(m, Push) and m.dst == away and
              m.kind is PushType.APPEND]
    assert sorted(pushed) == list(range(first, leader.end + 1))  # each exactly once
