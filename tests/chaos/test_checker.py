"""The queue-model checker on synthetic histories: each category it reports is planted and
must be found, with the ids it names; a clean history passes."""
import random
import time

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.chaos.checker import check
from ledgermq.chaos.history import History


def clean(n=20, step=0.1, topic="T"):
    """n acknowledged sends, each read once by a group and once by the drain."""
    h = History(clock=lambda: 0.0)
    for i in range(n):
        t = i * step
        h.invoke(f"m{i}", topic=topic, key=f"k{i % 3}", queue=i % 4, at=t)
        h.complete(f"m{i}", "ok", status="SEND_OK", queue=i % 4, offset=i // 4, at=t + 0.01)
        h.read(f"m{i}", topic=topic, reader="group", queue=i % 4, offset=i // 4, at=t + 0.02)
    h.drain_start(at=n * step)
    for i in range(n):
        h.read(f"m{i}", topic=topic, reader="drain", queue=i % 4, offset=i // 4, at=n * step)
    h.drain_end(at=n * step + 1)
    return h


def test_a_clean_history_is_valid_with_every_count_zero():
    r = check(clean())
    assert r["valid"] and r["problems"] == []
    assert r["attempts"] == {"total": 20, "ok": 20, "fail": 0, "info": 0}
    assert r["lost"]["count"] == r["unexpected"]["count"] == 0
    assert r["duplicates"]["count"] == 0 and r["order"]["inversions"] == 0
    assert r["reads"]["readers"] == {"group": 20, "drain": 20}  # two readers: no duplicate


def test_an_acknowledged_message_never_read_is_lost_with_its_id():
    h = clean()
    h.invoke("gone", topic="T", queue=1, at=0.5)
    h.complete("gone", "ok", status="SEND_OK", queue=1, offset=99, at=0.6)
    r = check(h)
    assert r["lost"] == {"count": 1, "ids": ["gone"], "read_before": 0}
    assert not r["valid"] and any("lost" in p and "gone" in p for p in r["problems"])


def test_a_message_read_during_the_run_but_gone_from_the_log_at_the_end_is_lost():
    """Acknowledged, read by a consumer, then destroyed (a master's damaged disk): the
    drain, reading every queue from its start, does not find it."""
    h = History(clock=lambda: 0.0)
    for m in ("kept", "destroyed"):
        h.invoke(m, topic="T", queue=0, at=0.1)
        h.complete(m, "ok", status="SEND_OK", queue=0, at=0.2)
        h.read(m, topic="T", reader="group", queue=0, at=0.3)
    h.drain_start(at=1.0)
    h.read("kept", topic="T", reader="drain", queue=0, offset=0, at=1.1)
    h.drain_end(at=1.2)
    r = check(h)
    assert r["lost"] == {"count": 1, "ids": ["destroyed"], "read_before": 1}
    assert not r["valid"]


def test_a_read_that_was_never_sent_is_unexpected():
    h = clean()
    h.read("ghost", topic="T", reader="drain", queue=0, offset=50, at=3.0)
    r = check(h)
    assert r["unexpected"] == {"count": 1, "ids": ["ghost"]}
    assert not r["valid"] and any("unexpected" in p and "ghost" in p for p in r["problems"])


def test_a_message_read_twice_by_one_reader_is_a_duplicate():
    h = clean()
    h.read("m3", topic="T", reader="group", queue=3, offset=0, at=2.5)  # redelivered
    h.read("m5", topic="T", reader="drain", queue=1, offset=1, at=2.5)
    h.read("m5", topic="T", reader="drain", queue=1, offset=1, at=2.6)
    r = check(h)
    d = r["duplicates"]
    assert (d["count"], d["distinct"], d["ids"], d["stored"]) == (3, 2, ["m3", "m5"], 0)
    assert r["valid"]  # at-least-once: allowed unless the caller says the mode rules them out
    r = check(h, duplicates_allowed=False)
    assert not r["valid"] and any("duplicate" in p for p in r["problems"])


def test_a_message_stored_at_two_offsets_is_a_stored_duplicate():
    h = clean()
    h.read("m2", topic="T", reader="drain", queue=2, offset=7, at=2.5)  # written twice
    d = check(h)["duplicates"]
    assert (d["count"], d["stored"], d["stored_ids"]) == (1, 1, ["m2"])


def orderly(h, ids, key="k", queue=0, t0=0.0):
    """Send `ids` in order with `key`, each after the previous was acknowledged."""
    for i, m in enumerate(ids):
        t = t0 + i
        h.invoke(m, topic="T", key=key, queue=queue, orderly=True, at=t)
        h.complete(m, "ok", status="SEND_OK", queue=queue, offset=i, at=t + 0.5)


def drained(h, reads, at=10.0):
    h.drain_start(at=at)
    for m, q in reads:
        h.read(m, topic="T", reader="drain", queue=q, at=at)
    h.drain_end(at=at + 1)
    return h


def test_orderly_messages_read_out_of_their_acknowledged_order_are_an_inversion():
    h = History(clock=lambda: 0.0)
    orderly(h, ["a", "b", "c"])
    r = check(drained(h, [("a", 0), ("c", 0), ("b", 0)]))
    assert r["order"]["inversions"] == 1 and not r["valid"]
    ex = r["order"]["examples"][0]
    assert (ex["key"], ex["first"], ex["then"], ex["reader"], ex["queue"]) == (
        "k", "c", "b", "drain", 0)
    h = History(clock=lambda: 0.0)
    orderly(h, ["a", "b", "c"])
    r = check(drained(h, [("a", 0), ("b", 0), ("c", 0), ("a", 0)]))  # a re-read: not an inversion
    assert r["order"] == {"keys": 1, "inversions": 0, "examples": []} and r["valid"]


def test_order_is_checked_only_for_orderly_sends_within_one_queue():
    h = History(clock=lambda: 0.0)
    orderly(h, ["a", "b"], key="k")
    orderly(h, ["c", "d"], key="j", queue=1, t0=5)
    for i, m in enumerate(["x", "y"]):  # not orderly: no order promised
        h.invoke(m, topic="T", key="k", queue=0, at=i)
        h.complete(m, "ok", queue=0, at=i + 0.5)
    # b before a, but in different queues (the key moved on a failover); y before x
    r = check(drained(h, [("b", 1), ("a", 0), ("y", 0), ("x", 0), ("c", 1), ("d", 1)]))
    assert r["order"]["inversions"] == 0 and r["order"]["keys"] == 2


def test_indeterminate_sends_are_reported_read_and_unread_and_allowed():
    h = clean()
    for m, t in (("i1", 0.3), ("i2", 0.4)):
        h.invoke(m, topic="T", queue=0, at=t)
        h.complete(m, "info", error="timeout", at=t + 3)
    h.invoke("i3", topic="T", at=1.0)  # still in flight when the run stopped
    h.read("i1", topic="T", reader="drain", queue=0, offset=40, at=2.5)
    r = check(h)
    assert r["indeterminate"] == {"count": 3, "read": 1, "unread": 2}
    assert r["lost"]["count"] == 0 and r["valid"]


def test_a_failed_send_that_was_read_is_reported():
    h = clean()
    h.invoke("f", topic="T", at=0.3)
    h.complete("f", "fail", error="SERVICE_NOT_AVAILABLE", at=0.31)
    h.read("f", topic="T", reader="drain", queue=0, offset=41, at=2.5)
    r = check(h)
    assert r["failed_but_read"] == {"count": 1, "ids": ["f"]} and not r["valid"]


def test_a_history_without_a_finished_drain_cannot_be_valid():
    h = clean()
    h.drain = None
    r = check(h)
    assert not r["drained"] and not r["valid"]
    assert any("drain" in p for p in r["problems"])


def with_fault(gap_from=10.0, recovered_at=13.6, heal=12.0, end=20.0):
    """Sends every 0.1 s; a fault at `gap_from` healed at `heal`; every send invoked from the
    fault on fails until one invoked at 13.5 is acknowledged at `recovered_at`."""
    h = History(clock=lambda: 0.0)
    n = h.fault_start("partition:isolate", ["n0"], at=gap_from)
    h.fault_end(n, at=heal)
    for i in range(int(end * 10)):
        t = round(i * 0.1, 6)
        m = f"m{i}"
        h.invoke(m, topic="T", queue=0, at=t)
        if gap_from <= t < 13.5:
            h.complete(m, "fail", error="timeout", at=t + 0.05)
        else:
            h.complete(m, "ok", queue=0, at=recovered_at if t == 13.5 else t + 0.02)
            h.read(m, topic="T", reader="drain", queue=0, at=end + 1)
    h.drain_start(at=end)
    h.drain_end(at=end + 2)
    return h


def test_recovery_time_is_from_the_fault_and_from_its_heal_to_the_first_ack_after_it():
    w = check(with_fault())["windows"]
    assert len(w) == 1
    assert w[0]["name"] == "partition:isolate" and w[0]["nodes"] == ["n0"]
    assert w[0]["recovery_s"] == pytest.approx(3.6)
    assert w[0]["recovery_after_heal_s"] == pytest.approx(1.6)
    assert (w[0]["ok"], w[0]["fail"]) == (0, 20)  # invoked inside the window


def test_a_fault_never_followed_by_an_acknowledgement_is_a_problem():
    h = History(clock=lambda: 0.0)
    h.invoke("a", topic="T", at=0.0)
    h.complete("a", "ok", at=0.1)
    h.read("a", topic="T", reader="drain", at=5.0)
    h.fault_start("kill", ["n1"], at=1.0)  # never healed
    h.invoke("b", topic="T", at=2.0)
    h.complete("b", "info", error="timeout", at=5.0)
    h.drain_start(at=5.0)
    h.drain_end(at=6.0)
    r = check(h)
    assert r["windows"][0]["recovery_s"] is None and r["windows"][0]["end"] is None
    assert not r["valid"] and any("kill" in p and "no acknowledged send" in p
                                  for p in r["problems"])


def test_throughput_and_latency_percentiles_per_window_and_overall():
    r = check(with_fault())
    quiet = r["overall"]
    # 200 sends, 35 failed (10.0 .. 13.4), the rest acknowledged in ~20 s
    assert quiet["ok"] == 165 and quiet["throughput"] == pytest.approx(165 / 19.92)
    assert quiet["latency_ms"]["p50"] == pytest.approx(20.0)
    assert quiet["latency_ms"]["max"] == pytest.approx(100.0)  # the one acked at 13.6
    w = r["windows"][0]
    assert w["throughput"] == 0.0 and w["latency_ms"] is None  # nothing acknowledged in it


def test_the_result_is_json_ready_and_deterministic():
    h = with_fault()
    a, b = check(h), check(h)
    assert orjson.dumps(a) == orjson.dumps(b)


def test_a_hundred_thousand_operations_check_in_well_under_two_seconds():
    rnd = random.Random(1)
    h = History(clock=lambda: 0.0)
    for i in range(50_000):
        t = i * 0.001
        h.invoke(f"m{i}", topic="T", key=f"k{i % 50}", queue=i % 8, orderly=True, at=t)
        h.complete(f"m{i}", "ok", queue=i % 8, offset=i // 8, at=t + 0.0005)
    for i in range(50_000):
        if rnd.random() > 0.001:
            h.read(f"m{i}", topic="T", reader="drain", queue=i % 8, offset=i // 8, at=60.0)
    for k in range(5):
        h.fault_start("kill", ["n0"], at=k * 10 + 1)
        h.fault_end(k, at=k * 10 + 5)
    h.drain_start(at=60.0)
    h.drain_end(at=61.0)
    t0 = time.perf_counter()
    r = check(h)
    took = time.perf_counter() - t0
    assert 20 < r["lost"]["count"] < 100 and r["order"]["inversions"] == 0
    assert took < 1.5, f"checking 100k operations took {took:.2f} s"


ids = st.sampled_from([f"m{i}" for i in range(30)])


@st.composite
def histories(draw):
    sent = draw(st.dictionaries(ids, st.sampled_from(["ok", "fail", "info", None]),
                                max_size=30))
    reads = draw(st.lists(st.tuples(ids, st.sampled_from(["g", "drain"])), max_size=40))
    return sent, reads


@settings(max_examples=200, deadline=None)
@given(histories())
def test_lost_and_unexpected_equal_a_brute_force_recount(hist):
    sent, reads = hist
    h = History(clock=lambda: 0.0)
    for i, (m, outcome) in enumerate(sent.items()):
        h.invoke(m, topic="T", at=float(i))
        if outcome:
            h.complete(m, outcome, at=i + 0.5)
    for m, reader in reads:  # the group reads before the drain
        h.read(m, topic="T", reader=reader, at=50.0 if reader == "drain" else 40.0)
    h.drain_start(at=50.0)
    h.drain_end(at=51.0)
    r = check(h)
    read_ids = [m for m, _ in reads]
    drained = [m for m, reader in reads if reader == "drain"]
    lost = [m for m, o in sent.items() if o == "ok" and m not in drained]
    unexpected = {m for m in read_ids if m not in sent}
    assert r["lost"]["count"] == len(lost) and r["lost"]["ids"] == sorted(lost)
    assert r["unexpected"]["count"] == len(unexpected)
    assert r["unexpected"]["ids"] == sorted(unexpected)
    assert r["valid"] == (not lost and not unexpected and not any(
        sent.get(m) == "fail" for m in read_ids))


def test_an_open_window_counts_sends_up_to_the_last_moment_of_the_history():
    h = History(clock=lambda: 0.0)
    h.fault_start("kill", ["n1"], at=1.0)  # the run died during the fault
    h.invoke("x", topic="T", at=2.0)  # its very last record
    w = check(h)["windows"][0]
    assert (w["end"], w["attempts"], w["info"]) == (None, 1, 1)


def test_a_group_the_drain_never_reached_is_not_drained():
    """Issue #28: a group whose route was missing at the end read 0 messages, and the run
    passed for drained. Every (group, queue) that acknowledged a send must be read to its
    end; one that reads short of its acknowledged offsets is said too."""
    h = History(clock=lambda: 0.0)
    for i, (broker, queue, offset) in enumerate([("broker-a", 0, 0), ("broker-a", 0, 1),
                                                 ("broker-b", 1, 0), ("broker-b", 2, 5)]):
        h.invoke(f"m{i}", topic="T", at=i * 0.1)
        h.complete(f"m{i}", "ok", broker=broker, queue=queue, offset=offset, at=i * 0.1 + 0.05)
    h.drain_start(at=1.0)
    h.read("m2", topic="T", reader="drain", broker="broker-b", queue=1, offset=0, at=1.1)
    h.drain_end(at=1.2, queues=[("broker-b", 1, 1), ("broker-b", 2, 3)])
    r = check(h)
    assert not r["drained"] and not r["valid"]
    assert r["drain_gaps"]["unreached"] == [
        "broker-a queue 0 acknowledged messages (up to offset 1) but the drain never read "
        "it to its end (not in the route, or unreadable)"]
    assert r["drain_gaps"]["short"] == [
        "broker-b queue 2 acknowledged up to offset 5 but its drain ended at offset 3 (offset 5 "
        "never read)"]
    assert any("broker-a queue 0" in p for p in r["problems"])
    # the same drain reaching every acknowledging queue to its end is drained
    h2 = History(clock=lambda: 0.0)
    h2.invoke("m", topic="T", at=0.0)
    h2.complete("m", "ok", broker="broker-a", queue=0, offset=0, at=0.1)
    h2.drain_start(at=1.0)
    h2.read("m", topic="T", reader="drain", broker="broker-a", queue=0, offset=0, at=1.1)
    h2.drain_end(at=1.2, queues=[("broker-a", 0, 1)])
    r2 = check(h2)
    assert r2["drained"] and r2["valid"] and r2["drain_gaps"] == {"unreached": [], "short": []}
