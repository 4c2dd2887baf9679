"""#34's recovery-target table: a window counts against the master's columns when a
broker it hit was master as it began, else against "one slave / follower"."""
from bench.chaos_table import TARGETS, target, targets_table


def window(name, nodes, masters, recovery=1.0, **applied):
    return {"name": name, "nodes": nodes, "group_outage_s": recovery,
            "applied": {"masters": masters, **applied}}


def test_windows_are_classed_by_the_role_of_what_they_hit():
    masters = ["a-n0", "b-n1"]
    assert target(window("kill", ["a-n0"], masters)) == "kill / pause of the master"
    assert target(window("pause", ["a-n1"], masters)) == "one slave / follower"
    assert target(window("partition:split", ["b-n1", "b-n2"], masters)) == \
        "partition isolating the master"
    assert target(window("corrupt", ["b-n1"], masters)) == \
        "lost writes / corruption on the master"
    assert target(window("disk-full", ["b-n0"], masters)) == "one slave / follower"
    assert target(window("disk-full", ["b-n1"], masters)) == "slow / full disk on the master"
    for coordinator in ("namesrv0", "c1", "control2"):
        assert target(window("kill", [coordinator], masters)) == \
            "a name server, controller or control node"
    assert target(window("partition:ring", ["a-n1", "c0", "c1"], masters)) == \
        "one slave / follower"
    # the master the window picked counts even when the status missed it (mid-failover)
    assert target(window("kill", ["a-n2"], [], master="a-n2")) == "kill / pause of the master"
    assert target({"name": "kill", "nodes": ["a-n0"], "applied": {}}) is None  # not recorded
    # broker-b's master went unseen as the window began: not known to be a slave
    assert target(window("pause", ["b-n2"], ["a-n0"])) == "kill / pause of the master"


def test_one_row_per_mode_with_the_longest_time_over_seeds():
    runs = [{"mode": "dledger", "seed": s, "lost": 0, "unexpected": 0, "duplicates": 0,
             "check": {"attempts": {"total": 100}},
             "windows": [window("kill", ["a-n0"], ["a-n0"], recovery=s),
                         window("kill", ["a-n1"], ["a-n0"], recovery=None if s == 2 else 0.5)]}
            for s in (1, 2)]
    row = targets_table(runs).splitlines()[2].split(" | ")
    assert row[1] == "1, 2"
    assert row[2 + TARGETS.index("kill / pause of the master")] == "2x 2.0 s"
    assert row[2 + TARGETS.index("one slave / follower")] == "2x never"
    assert row[-1] == "0 / 0 / 0 of 200 |"
    # beside another system: a row per system and mode
    other = [{**r, "system": "rocketmq"} for r in runs]
    rows = targets_table(runs + other).splitlines()
    assert rows[0].startswith("| system | mode |") and len(rows) == 4
    assert rows[3].startswith("| rocketmq | dledger | 1, 2 |")


def test_an_outage_that_starts_late_is_measured_whole():
    """A full disk is noticed a second after it fills: the group acknowledges at once, then
    nothing for 8 s. The first acknowledgement says 0.2 s; the longest stretch says 8."""
    from types import SimpleNamespace

    from ledgermq.chaos.checker import group_recovery, longest_outage

    def ack(invoked, completed, broker="broker-a"):
        return SimpleNamespace(outcome="ok", broker=broker, invoked=invoked,
                               completed=completed)
    h = SimpleNamespace(attempts={i: a for i, a in enumerate([
        ack(9.9, 10.1), ack(10.1, 10.2), ack(10.5, 10.6), ack(12, 18.6, "broker-b"),
        ack(18.5, 18.6), ack(25, 25.2)])})
    assert group_recovery(h, 10.0, {"broker-a"}) == 0.2
    assert longest_outage(h, 10.0, 18.6, {"broker-a"}) == 8.0
    assert longest_outage(h, 10.0, None, {"broker-a"}) is None  # never back


def test_a_consumer_outage_ends_with_a_message_sent_after_the_heal():
    """A consumer reading old messages again, or another group's, has not read again: the
    read side's outage runs until a message sent to the hit group after the heal is read."""
    from ledgermq.chaos.history import History
    from ledgermq.chaos.checker import read_outage

    h = History()
    for i, (invoked, group) in enumerate([(9.0, "broker-a"), (10.5, "broker-a"),
                                          (11.0, "broker-b"), (16.0, "broker-a")]):
        h.apply({"t": "invoke", "id": f"m{i}", "topic": "t", "at": invoked, "broker": group})
    for mid, at, reader, group in [("m0", 10.2, "push", "broker-a"),   # sent before start
                                   ("m1", 10.7, "pull", "broker-a"),
                                   ("m2", 12.0, "push", "broker-b"),   # another group
                                   ("m1", 14.0, "drain", "broker-a"),  # not a consumer
                                   ("m3", 16.4, "push", "broker-a")]:  # sent after the heal
        h.apply({"t": "read", "id": mid, "topic": "t", "at": at, "reader": reader,
                 "broker": group})
    assert read_outage(h, 10.0, 15.0, {"broker-a"}) == 5.7  # 10.7 -> 16.4
    assert read_outage(h, 10.0, 17.0, {"broker-a"}) is None  # nothing sent after 17 read
    assert read_outage(h, 10.0, None, {"broker-a"}) is None  # never healed
