"""The seeded fault schedule: the same seed replays the same faults, one at a time with quiet
gaps and a final quiet period, each aimed at nodes that can take it."""
from itertools import pairwise

import orjson
import pytest

from ledgermq.chaos import cuts
from ledgermq.chaos.schedule import FAMILIES, Window, parse_faults, plan

NODES = {"b0": "broker:g0", "b1": "broker:g0", "b2": "broker:g0",
         "b3": "broker:g1", "b4": "broker:g1", "b5": "broker:g1",
         "c0": "controller", "ns0": "namesrv", "ns1": "namesrv"}
ALL = list(FAMILIES)


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    a = plan(7, ALL, NODES, duration=600, interval=10)
    assert a == plan(7, ALL, NODES, duration=600, interval=10)
    assert [w.to_json() for w in a] == [w.to_json() for w in plan(7, ALL, NODES, 600, 10)]
    assert a != plan(8, ALL, NODES, duration=600, interval=10)


@pytest.mark.parametrize("seed", range(20))
def test_windows_come_one_at_a_time_with_quiet_gaps_and_a_final_quiet_period(seed):
    ws = plan(seed, ALL, NODES, duration=300, interval=8, quiet=5, final_quiet=20)
    assert len(ws) >= 10
    assert ws[0].start >= 5  # a warm-up before the first fault
    for w in ws:
        assert 0 < w.end - w.start <= 8
    for prev, nxt in pairwise(ws):
        assert nxt.start - prev.end >= 5, (prev, nxt)
    assert ws[-1].end <= 300 - 20  # healed, then quiet, before the drain


def test_each_family_asked_comes_in_turn_and_no_other():
    ws = plan(3, ["kill", "partition", "slow"], NODES, duration=400, interval=5, quiet=5)
    fams = [w.fault for w in ws]
    assert set(fams) == {"kill", "partition", "slow"}
    for i in range(0, len(fams) - 2, 3):  # each round of three has each family once
        assert sorted(fams[i:i + 3]) == ["kill", "partition", "slow"]


def test_store_faults_hit_brokers_and_signals_any_server():
    ws = plan(1, ["lost-writes", "corrupt", "disk-full", "kill", "pause"], NODES,
              duration=2000, interval=5)
    for w in ws:
        if w.fault in ("lost-writes", "corrupt", "disk-full"):
            assert all(NODES[t].startswith("broker") for t in w.targets)
            # one broker, or (lost-writes) one group's, for the runner to pick its master
            assert len(w.targets) == 1 or (w.fault == "lost-writes" and
                                           w.params["pick"] == "master" and
                                           len({NODES[t] for t in w.targets}) == 1)
        else:
            assert w.targets and all(t in NODES for t in w.targets)
            if w.params.get("pick") == "master":  # the runner picks the group's master
                assert len({NODES[t] for t in w.targets}) == 1 and len(w.targets) == 3
    assert {NODES[t] for w in ws if w.fault == "kill" for t in w.targets} >= {
        "controller", "namesrv"}


def test_partition_shapes_fit_the_cut_functions():
    ws = plan(5, ["partition"], NODES, duration=2000, interval=5)
    shapes = {w.params["shape"] for w in ws}
    assert shapes == {"isolate", "split", "bridge", "ring", "clients"}
    servers = [n for n, r in NODES.items() if r != "namesrv"]
    # with several groups: one group's brokers and the controller, the servers that group's
    # replication sees (a cut between two groups' brokers changes nothing)
    one_group = [sorted(n for n, r in NODES.items() if r in (f"broker:{g}", "controller"))
                 for g in ("g0", "g1")]
    for w in ws:
        p = w.params
        if p["shape"] == "split":
            small, big = p["groups"]
            assert len(small) < len(big) and sorted(small + big) in one_group
            assert cuts.partition(p["groups"])
        elif p["shape"] == "bridge":
            assert cuts.bridge(p["left"], p["right"], p["middle"])
            assert sorted(p["left"] + p["right"] + [p["middle"]]) in one_group
        elif p["shape"] == "ring":
            assert sorted(p["ring"]) in one_group and cuts.majorities_ring(p["ring"])
        elif p["shape"] in ("isolate", "clients"):
            assert w.targets and set(w.targets) <= set(servers)
    only_ring = plan(5, ["partition:ring"], NODES, duration=100, interval=5)
    assert {w.params["shape"] for w in only_ring} == {"ring"}
    assert all(w.label == "partition:ring" for w in only_ring)


def test_with_one_group_or_too_few_in_a_group_a_partition_spans_every_server():
    one = {f"b{i}": "broker:g0" for i in range(4)} | {"ns0": "namesrv"}
    for w in plan(1, ["partition:ring", "partition:split"], one, duration=200, interval=5):
        nodes = w.params.get("ring") or sum(w.params["groups"], [])
        assert sorted(nodes) == ["b0", "b1", "b2", "b3"]
    small = {"a0": "broker:a", "a1": "broker:a", "b0": "broker:b", "b1": "broker:b",
             "control": "controlnode"}
    for w in plan(2, ["partition:ring"], small, duration=200, interval=5):
        assert sorted(w.params["ring"]) == sorted(small)  # 3 per group: too few for a ring


def test_slow_links_have_seeded_netem_knobs():
    ws = plan(2, ["slow"], NODES, duration=200, interval=5)
    for w in ws:
        p = w.params
        assert 20 <= p["delay_ms"] <= 500 and 0 <= p["jitter_ms"] <= p["delay_ms"]
        assert 0 <= p["loss_pct"] <= 20 and 0 <= p["reorder_pct"] <= 25
        assert isinstance(p["seed"], int)


@pytest.mark.parametrize("faults, nodes, match", [
    (["explode"], NODES, "unknown fault 'explode'.*kill"),
    (["partition:circle"], NODES, "unknown partition shape 'circle'"),
    (["partition:ring"], {"a": "broker", "b": "broker", "c": "broker"},
     "ring needs at least 4"),
    (["corrupt"], {"c0": "controller", "ns0": "namesrv"}, "corrupt needs a broker"),
    (["kill"], {"x": "toaster"}, "unknown role 'toaster'"),
    ([], NODES, "no fault families"),
])
def test_a_schedule_that_makes_no_sense_is_refused_clearly(faults, nodes, match):
    with pytest.raises(ValueError, match=match):
        plan(1, faults, nodes, duration=100, interval=5)


def test_a_duration_too_short_for_one_window_is_refused():
    with pytest.raises(ValueError, match="too short"):
        plan(1, ["kill"], NODES, duration=12, interval=10, quiet=5)


def test_fault_lists_parse_from_the_command_line_form():
    assert parse_faults("kill, partition:ring,slow") == ["kill", "partition:ring", "slow"]
    assert parse_faults("all") == list(FAMILIES)
    with pytest.raises(ValueError, match="unknown fault 'nap'"):
        parse_faults("kill,nap")


def test_a_window_round_trips_through_json():
    w = plan(4, ["partition"], NODES, duration=100, interval=5)[0]
    assert Window.from_json(orjson.loads(orjson.dumps(w.to_json()))) == w


@pytest.mark.parametrize("coordinators, also", [
    ({"c0": "controller", "c1": "controller", "c2": "controller"}, "controller-leader"),
    ({"control0": "controlnode", "control1": "controlnode", "control2": "controlnode"},
     "controlnode-leader"),
    ({"control": "controlnode"}, "control"),
])
def test_combined_kills_a_master_with_whatever_elects_it(coordinators, also):
    """A controller group's leader, a control node group's leader, or the one control
    node: found when the window opens, as the group's master is."""
    nodes = {"a0": "broker:a", "a1": "broker:a", "ns0": "namesrv", **coordinators}
    for w in plan(3, ["combined"], nodes, duration=100, interval=5):
        assert w.params["pick"] == "master" and w.params["also"] == also
        assert set(coordinators) <= set(w.targets)
