"""Which lost messages a mode's promise does not cover: those a group acknowledged before a
fault the promise names as outside it hit one of that group's brokers. Everything else
lost still breaks the promise. (No mode names such a fault now: classic HA's SYNC_MASTER
used to, for its own damaged or power-cut disk, until it refilled from its slave.)"""
from ledgermq.chaos.history import History
from ledgermq.chaos.runner import PROMISES, _excused


def test_only_acks_before_an_uncovered_fault_on_their_own_group_are_excused():
    h = History(clock=lambda: 0.0)
    for m, group, acked in [("early-a", "broker-a", 1.0), ("late-a", "broker-a", 6.0),
                            ("early-b", "broker-b", 1.0)]:
        h.invoke(m, topic="T", at=acked - 0.5)
        h.complete(m, "ok", broker=group, at=acked)
    h.invoke("cpp-read", topic="T", at=0.5)  # no group in its answer: the read says where
    h.complete("cpp-read", "ok", at=1.0)
    h.read("cpp-read", topic="T", reader="push", broker="broker-a", at=2.0)
    h.invoke("cpp-unread", topic="T", at=0.5)  # never read: where it went is unknown
    h.complete("cpp-unread", "ok", at=1.0)
    h.fault_start("corrupt", ["a-n0"], at=5.0)
    h.fault_end(0, at=8.0)
    h.drain_start(at=10.0)
    h.drain_end(at=11.0)  # the drain read none of them: all three lost
    evidence = [{"window": {"fault": "corrupt", "start": 5.0}, "nodes": ["a-n0"]}]
    groups = {"a-n0": "broker-a", "b-n0": "broker-b"}
    outside = {"corrupt": "a damaged master disk"}
    assert _excused(h, evidence, groups, outside) == {"early-a", "cpp-read"}
    assert _excused(h, evidence, groups, PROMISES["sync"][2]) == set()
    assert _excused(h, evidence, groups, PROMISES["dledger"][2]) == set()
