"""Apache RocketMQ under the chaos harness (bench/rocketmq_chaos.py, #34): laid out on the
same host names as ledgermq's layout (so one seed plans the same windows for both), and
under a real run a killed DLedger leader's group elects again, the window's evidence shows
the kill took, and no acknowledged message is lost. The real run starts eight JVMs: in
`make compat`. The side-by-side runs: `make chaos-rocketmq`."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos_table import table
from bench.rocketmq_anchor import missing_tools
from bench.rocketmq_chaos import RocketMQSystem
from bench.rocketmq_layouts import on_hosts
from ledgermq.chaos import available
from ledgermq.chaos.runner import Options, System, run
from ledgermq.chaos.schedule import plan


def _ip(hosts: dict[str, str]):
    addrs = {n: f"10.9.0.{i + 2}" for i, n in enumerate(sorted(hosts))}
    return addrs.__getitem__


@pytest.mark.parametrize("mode", ["dledger", "controller"])
def test_rocketmq_takes_the_host_names_and_roles_of_ledgermqs_layout(mode, tmp_path):
    replicas, controllers = (3, 1) if mode == "dledger" else (2, 3)
    hosts = System().hosts(mode, replicas, 2, 2, controllers)
    assert RocketMQSystem().hosts(mode, replicas, 2, 2, controllers) == hosts
    ip = _ip(hosts)
    nodes = {n.name: n for n in on_hosts(mode, tmp_path, hosts, ip)}
    assert set(nodes) == set(hosts)  # every host runs the process of its name
    for name, role in hosts.items():
        node = nodes[name]
        assert node.addr.split(":")[0] == ip(name)
        assert node.kind == role.split(":")[0]
        if node.kind == "broker":  # its group and cluster, as ledgermq's (DefaultCluster)
            assert node.group == role.split(":")[1] == node.conf["brokerName"]
            assert node.conf["brokerClusterName"] == "DefaultCluster"
            assert node.conf["brokerIP1"] == ip(name)
            assert node.conf["namesrvAddr"] == ";".join(
                nodes[n].addr for n, r in hosts.items() if r == "namesrv")
    for group in {r for r in hosts.values() if r.startswith("broker:")}:
        members = sorted(n for n, r in hosts.items() if r == group)
        if mode == "dledger":  # a Raft group of its own brokers, on their hosts
            peers = {nodes[n].conf["dLegerPeers"] for n in members}
            assert peers == {";".join(f"n{i}-{ip(n)}:40911" for i, n in enumerate(members))}
            assert {nodes[n].conf["dLegerGroup"] for n in members} == {group.split(":")[1]}
        else:  # every broker knows every controller
            ctl = sorted(n for n, r in hosts.items() if r == "controller")
            assert {nodes[n].conf["controllerAddr"] for n in members} == \
                {";".join(f"{ip(c)}:9878" for c in ctl)}


def _result(system: str, windows: list[dict]) -> dict:
    return {"system": system, "mode": "dledger", "seed": 4, "windows": windows, "lost": 0,
            "unexpected": 0, "duplicates": 3, "indeterminate": 7,
            "check": {"attempts": {"total": 1200, "ok": 1180, "fail": 13, "info": 7}}}


def test_the_table_gives_each_familys_longest_recovery_and_says_never():
    w = [{"name": "kill", "group_recovery_s": 0.4, "group_recovery_after_heal_s": 0.1},
         {"name": "kill", "group_recovery_s": 2.6, "group_recovery_after_heal_s": 0.3},
         {"name": "partition:isolate", "group_recovery_s": None,
          "group_recovery_after_heal_s": None}]
    lines = table([_result("ledgermq", w[:2]), _result("rocketmq", w)]).splitlines()
    assert lines[0] == "| system | mode | seed | kill | partition | " \
        "lost / unexpected / dup / indeterminate of sent |"
    assert lines[2] == "| ledgermq | dledger | 4 | 2x 2.6 s (0.3 s after the heal) | — | " \
        "0 / 0 / 3 / 7 of 1,200 (13 refused) |"
    assert lines[3].startswith("| rocketmq | dledger | 4 | 2x 2.6 s (0.3 s after the heal) | "
                               "1x never (never after the heal) |")


def _seed_killing_a_master_first(hosts: dict[str, str]) -> int:
    """A seed whose first window kills a group's master (the plan is pure: found here)."""
    for seed in range(200):
        w = plan(seed, ["kill"], hosts, 70, 20)[0]
        if w.params.get("pick") == "master":
            return seed
    raise AssertionError("no seed in 200 kills a master first")


@pytest.mark.compat
@pytest.mark.skipif(available() is not None or missing_tools() is not None,
                    reason=f"{available() or missing_tools()}")
def test_a_killed_rocketmq_dledger_leader_is_replaced_and_nothing_acknowledged_is_lost(
        tmp_path: Path):
    system = RocketMQSystem()
    seed = _seed_killing_a_master_first(system.hosts("dledger", 3, 2, 2, 1))
    res = run(Options("dledger", "kill", 70, seed, tmp_path / "out", interval=20, rate=40),
              system=system)
    assert res["system"] == "rocketmq" and res["promise_kept"], res["broken"]
    assert res["lost"] == 0 and res["unexpected"] == 0
    (w, *_) = res["windows"]
    ev = w["applied"]
    assert ev["master"] in w["nodes"] and ev["dead"] == list(ev["killed"]) == w["nodes"], ev
    assert set(ev["restarted"]) == set(ev["killed"]) and \
        all(ev["restarted"][n] != ev["killed"][n] for n in ev["killed"]), ev
    # its group (RocketMQ's DLedger elects a new leader) took writes again in the window
    assert w["group_recovery_s"] is not None and \
        w["group_recovery_s"] < w["applied"]["window"]["end"] - w["applied"]["window"]["start"]
