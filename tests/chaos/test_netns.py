"""Test hosts on real namespaces with real sockets: reachability, partitions, client cuts,
slow links, and that nothing a net made outlives it (normal exit, exception, SIGTERM,
SIGINT, and a SIGKILLed run swept afterwards). Needs root; skips saying why otherwise."""
from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import pytest

from ledgermq.chaos import NetError, TestNet, available, sweep
from ledgermq.chaos.iproute import links, namespaces
from tests.chaos import netprobe
from tests.wait import wait_until

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

PROBE = netprobe.__file__
PORT = 7000  # every host has its own port space
CUT_TIMEOUT = 1.0  # how long a probe waits before calling a link cut
REPO = Path(__file__).resolve().parents[2]


def read_line(p: subprocess.Popen, timeout: float = 20) -> str:
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, f"no line from pid {p.pid} within {timeout}s"
    return p.stdout.readline().strip()


def start_echo(host) -> subprocess.Popen:
    p = host.popen([sys.executable, PROBE, "serve", host.addr, PORT],
                   stdout=subprocess.PIPE, text=True)
    assert read_line(p) == "ready"
    p.stdout.close()  # it prints nothing more
    return p


def reach(src, *dsts) -> dict[str, str]:
    """From host `src`, one echo with each host in `dsts`: {name: "ok" or the error}."""
    out = src.run([sys.executable, PROBE, "reach", CUT_TIMEOUT,
                   *[f"{d.addr}:{PORT}" for d in dsts]], capture_output=True, text=True)
    got = json.loads(out.stdout)
    return {d.name: got[f"{d.addr}:{PORT}"] for d in dsts}


def from_root(*dsts) -> dict[str, str]:
    return {d.name: netprobe.echo_once(d.addr, PORT, CUT_TIMEOUT) for d in dsts}


def ours(tag: str) -> list[str]:
    return [n for n in namespaces() + links() if n.startswith(tag + "-")]


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_hosts_reach_each_other_and_the_root_side_and_two_nets_coexist():
    with TestNet(["a", "b"]) as net, TestNet(1) as other:
        a, b = net.hosts
        assert net.client_addr != other.client_addr and a.addr != other.hosts[0].addr
        for h in (a, b, other.hosts[0]):
            start_echo(h)
        assert reach(b, a) == {"a": "ok"} and reach(a, b) == {"b": "ok"}
        assert from_root(a, b, other.hosts[0]) == {"a": "ok", "b": "ok", "h0": "ok"}
        # a host sees only its own interfaces: lo and eth0 with its address
        shown = a.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
        assert f"inet {a.addr}/" in shown and b.addr not in shown and net.client_addr not in shown


def test_partition_cuts_hosts_apart_while_clients_reach_both_and_heal_restores():
    with TestNet(["a", "b"]) as net:
        a, b = net.hosts
        start_echo(a), start_echo(b)
        held = b.popen([sys.executable, PROBE, "hold", f"{a.addr}:{PORT}"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert read_line(held) == "up"

        net.partition([[a], [b]])
        net.partition([["a"], ["b"]])  # idempotent: the same cut again changes nothing
        rules = a.run(["ip", "rule"], capture_output=True, text=True).stdout
        assert rules.count("blackhole") == 1, rules
        assert "timed out" in reach(b, a)["a"]  # dropped silently, as by a dead switch
        assert "timed out" in reach(a, b)["b"]
        assert from_root(a, b) == {"a": "ok", "b": "ok"}
        held.stdin.write(f"echo {CUT_TIMEOUT}\n"), held.stdin.flush()
        assert read_line(held) == "stalled"  # the established connection hangs

        net.heal()
        assert reach(b, a) == {"a": "ok"} and reach(a, b) == {"b": "ok"}
        held.stdin.write("echo 15\n"), held.stdin.flush()  # TCP retransmits after backoff
        assert read_line(held) == "ok"
        held.stdin.close(), held.stdout.close()


def test_a_bridge_host_sees_both_halves_that_cannot_see_each_other():
    with TestNet(["left", "right", "mid"]) as net:
        left, right, mid = net.hosts
        for h in net.hosts:
            start_echo(h)
        net.bridge([left], [right], mid)
        assert net.cuts == {frozenset(("left", "right"))}
        got = reach(mid, left, right) | {"left->right": reach(left, right)["right"]}
        assert got["left"] == "ok" and got["right"] == "ok", got
        assert "timed out" in got["left->right"], got
        net.isolate(mid)  # replaces the bridge: left and right talk again, mid is alone
        got = reach(left, right, mid)
        assert got["right"] == "ok" and "timed out" in got["mid"], got


def test_cut_clients_blocks_only_the_root_side_and_heal_resumes_its_connection():
    with TestNet(["a", "b"]) as net:
        a, b = net.hosts
        start_echo(a), start_echo(b)
        conn = netprobe.Conn(a.addr, PORT)
        assert conn.echo(5) is not None

        net.cut_clients(a)
        assert "timed out" in from_root(a)["a"]
        assert conn.echo(CUT_TIMEOUT) is None  # stalls, not reset
        assert from_root(b) == {"b": "ok"}
        assert reach(b, a) == {"a": "ok"}  # hosts still talk to each other

        net.heal()
        assert from_root(a) == {"a": "ok"}
        assert conn.echo(15) is not None
        conn.close()


def test_slow_adds_the_delay_to_a_round_trip_and_unslow_removes_it():
    delay_ms = 150
    with TestNet(["a"]) as net:
        (a,) = net.hosts
        start_echo(a)
        conn = netprobe.Conn(a.addr, PORT)

        def median_rtt_ms() -> float:
            rtts = [conn.echo(5) for _ in range(7)]
            assert None not in rtts, f"a round trip got no answer within 5 s: {rtts}"
            return 1000 * statistics.median(rtts)

        base = median_rtt_ms()
        net.slow(a, delay_ms=delay_ms, jitter_ms=10)
        slowed = median_rtt_ms()
        assert base + 0.8 * delay_ms <= slowed <= base + delay_ms + 500, (base, slowed)

        net.slow(a, delay_ms=delay_ms, loss_pct=100)  # every frame a sends is lost
        assert conn.echo(CUT_TIMEOUT) is None
        net.unslow(a)
        assert conn.echo(15) is not None  # retransmitted once the link is whole again
        after = median_rtt_ms()
        assert after < 0.5 * delay_ms, (base, slowed, after)
        conn.close()


def test_closing_stops_every_process_and_removes_every_namespace_and_link():
    for fail in (False, True):
        with pytest.raises(RuntimeError) if fail else nullcontext():
            with TestNet(2) as net:
                tag = net.tag
                start_echo(net.hosts[0])
                # a child that leaves a grandchild behind in another session
                net.hosts[1].popen(["sh", "-c", "setsid sleep 300 & sleep 300"])
                net.slow(net.hosts[0], delay_ms=5)
                wait_until(lambda: len(_pids_in(net.hosts[1])) >= 2, "sleep and its grandchild")
                pids = _pids_in(net.hosts[0]) + _pids_in(net.hosts[1])
                assert ours(tag)
                if fail:
                    raise RuntimeError("the test body failed")
        assert ours(tag) == [], ours(tag)
        assert all(gone(p) for p in pids), [p for p in pids if not gone(p)]


def _pids_in(host) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


# (SIGHUP as a terminal's hang-up ends a process, SIGINT as Ctrl-C does: a test run
# started under nohup hands its children SIGHUP ignored, one started in the background by a
# shell script SIGINT ignored, and a run that ignores a signal rightly keeps going)
CHILD = textwrap.dedent("""
    import json, signal, subprocess, sys
    from ledgermq.chaos import TestNet
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with TestNet(2) as net:
        p = net.hosts[0].popen(["sleep", "300"])
        print(json.dumps({"tag": net.tag, "pid": p.pid}), flush=True)
        sys.stdin.read()
""")


def _child_with_a_net() -> tuple[subprocess.Popen, str, int]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    info = json.loads(read_line(p, timeout=30))
    assert ours(info["tag"])
    return p, info["tag"], info["pid"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_run_stopped_by_a_signal_removes_its_net(sig):
    p, tag, pid = _child_with_a_net()
    with p:
        p.send_signal(sig)
        p.wait(30)
    assert ours(tag) == [], ours(tag)
    assert gone(pid)


def test_a_terminated_run_unwinds_what_else_it_holds(tmp_path):
    """SIGTERM closes the nets and then unwinds the run's other `with` blocks (chaos:
    its small disks' mounts, its clients), which dying of the signal left behind."""
    child = textwrap.dedent("""
        import contextlib, json, pathlib, sys
        from ledgermq.chaos import TestNet
        @contextlib.contextmanager
        def held(path):
            try:
                yield
            finally:
                pathlib.Path(path).write_text("released")
        with held(sys.argv[1]), TestNet(1) as net:
            print(json.dumps({"tag": net.tag, "pid": 0}), flush=True)
            sys.stdin.read()
    """)
    marker = tmp_path / "released"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    p = subprocess.Popen([sys.executable, "-c", child, str(marker)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    with p:
        tag = json.loads(read_line(p, timeout=30))["tag"]
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    assert ours(tag) == [] and marker.read_text() == "released"


def test_sweep_removes_a_killed_runs_leftovers_and_nothing_else():
    with TestNet(1) as mine:
        p, tag, pid = _child_with_a_net()
        with p:
            p.kill()
            p.wait(30)
        assert ours(tag), "a SIGKILLed run leaves its net behind"
        left = set(ours(tag))
        swept = sweep()
        assert left <= set(swept) and ours(tag) == [], (left, swept)
        assert all(n.startswith(tag + "-") for n in swept), swept
        wait_until(lambda: gone(pid), f"the killed run's process {pid} ended")
        assert len(ours(mine.tag)) == 3  # our live net: its namespace, veth and bridge
        start_echo(mine.hosts[0])
        assert from_root(mine.hosts[0]) == {"h0": "ok"}


def test_bad_requests_get_clear_errors():
    with pytest.raises(ValueError, match="unique"):
        TestNet(["a", "a"])
    with pytest.raises(ValueError, match="1..200 hosts"):
        TestNet(0)
    with TestNet(["a", "b"]) as net:
        with pytest.raises(ValueError, match="overlaps"):
            TestNet(1, subnet=f"{net.client_addr}/24").open()
        with pytest.raises(ValueError, match="no host 'c'"):
            net.isolate("c")
        with pytest.raises(ValueError, match="loss_pct must be a percentage"):
            net.slow("a", loss_pct=150)
        with pytest.raises(ValueError, match="at least 4 hosts"):
            net.ring()
        assert net.cuts == set()  # a refused fault changed nothing
    with pytest.raises(NetError, match="not open"):
        net.heal()


def test_without_root_the_reason_is_given():
    # imports as root (the interpreter may live where nobody cannot read), asks as nobody
    code = ("import os; from ledgermq.chaos import available; os.setresuid(65534, 65534, "
            "65534); print(available())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert out.stdout.strip() == "test hosts need root (they create network namespaces); " \
        "uid is 65534", out
