"""Driving a replica group from the command line: up, status (a table, a health line, an
exit code), stop a node as a crash, watch the failover, start it again, down."""
import json
import subprocess
import sys

from tests.wait import wait_until

from .test_cli import cli


def status(d):
    p = cli("cluster", "status", "--dir", d, "--json", check=False)
    return p.returncode, json.loads(p.stdout)


def test_a_failover_driven_from_the_cli(tmp_path):
    d = tmp_path / "g"
    up = cli("cluster", "up", "--mode", "dledger", "--replicas", 3, "--dir", d)
    try:
        namesrv = json.loads((d / "cluster.json").read_text())["namesrv"]
        assert f"next: ledgermq produce -n {namesrv}" in up.stdout
        code, st = wait_until(lambda: (lambda r: r if r[0] == 0 else None)(status(d)),
                              "a healthy group")
        leader = next(p["name"] for p in st["processes"] if p.get("role") == "LEADER")
        assert st["health"].startswith(f"leader {leader}, term ") and \
            st["health"].endswith("3/3 up, quorum ok")
        text = cli("cluster", "status", "--dir", d).stdout
        assert "term/epoch" in text and st["health"] in text
        port = next(p["port"] for p in st["processes"] if p["name"] == leader)
        raft = cli("admin", "dledgerStatus", "-n", namesrv, "-b", f"127.0.0.1:{port}").stdout
        assert f"{leader}: LEADER, term" in raft and "acknowledged index" in raft
        raft_json = json.loads(cli("admin", "dledgerStatus", "-n", namesrv, "-b",
                                   f"127.0.0.1:{port}", "--json").stdout)
        assert raft_json["role"] == "LEADER" and len(raft_json["peers"]) == 3
        assert cli("cluster", "stop", leader, "--kill", "--dir", d).stdout.strip() == \
            f"{leader} stopped"
        code, st = status(d)
        assert code == 1 and "2/3 up" in st["health"] and f"down: {leader}" in st["health"]
        new = wait_until(lambda: next((p["name"] for p in status(d)[1]["processes"]
                                       if p.get("role") == "LEADER"), None), "a new leader")
        assert new != leader
        assert cli("cluster", "start", leader, "--dir", d).stdout.startswith(f"{leader} started")
        wait_until(lambda: status(d)[0] == 0, "the group whole again")
        out = cli("cluster", "restart", leader, "--dir", d).stdout.splitlines()
        assert out[0] == f"{leader} stopped" and out[1].startswith(f"{leader} started")
        wait_until(lambda: status(d)[0] == 0, "the group whole after a restart")
    finally:
        down = cli("cluster", "down", "--dir", d)
    assert down.stdout.strip().startswith("stopped 4 of 4 processes")


def test_down_leaves_a_reused_pid_alone(tmp_path):
    """A pid recorded by `up` that now belongs to another program is not signalled."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = tmp_path / "g"
        d.mkdir()
        (d / "cluster.json").write_text(json.dumps({"mode": "dledger", "namesrv": "x:1",
            "processes": [{"name": "namesrv", "pid": other.pid, "port": 1,
                           "args": ["namesrv", "--port", "1", "--json"]}]}))
        out = cli("cluster", "down", "--dir", d).stdout
        assert out.strip() == "stopped 0 of 1 processes" and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_zombie_counts_as_down():
    """A process that exited but whose parent has not reaped it yet is not running."""
    from ledgermq.localcluster.cluster import pid_alive
    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(0)\n"
        "print(pid, flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        wait_until(lambda: not pid_alive(child), "the unreaped child seen as down", timeout=5)
        assert parent.poll() is None  # its parent is still there, not reaping it
    finally:
        parent.kill()
        parent.wait()


def test_cluster_up_with_acl_refuses_unsigned_requests_and_serves_its_admin_account(
        tmp_path, monkeypatch):
    d = tmp_path / "acl"
    up_out = cli("cluster", "up", "--mode", "async", "--replicas", 1, "--acl", "--dir", d)
    assert "export LEDGERMQ_ACCESS_KEY=ledgermq-admin" in up_out.stdout
    try:
        ns = json.loads((d / "cluster.json").read_text())["namesrv"]
        refused = cli("produce", "-n", ns, "-t", "Demo", "--body", "x", check=False)
        assert refused.returncode == 1 and "NO_PERMISSION" in refused.stderr
        monkeypatch.setenv("LEDGERMQ_ACCESS_KEY", "ledgermq-admin")
        monkeypatch.setenv("LEDGERMQ_SECRET_KEY", (d / "acl" / "admin.secret").read_text().strip())
        sent = json.loads(cli("produce", "-n", ns, "-t", "Demo", "--body", "x", "--json").stdout)
        assert sent["statuses"] == {"SEND_OK": 1}
        monkeypatch.delenv("LEDGERMQ_ACCESS_KEY")
        st = json.loads(cli("cluster", "status", "--dir", d, "--json").stdout)  # signs itself
        assert [p.get("role") for p in st["processes"] if p["name"] == "n0"] == ["ASYNC_MASTER"]
    finally:
        cli("cluster", "down", "--dir", d)
