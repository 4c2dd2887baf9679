"""The `ledgermq` commands a user types, against a real `ledgermq dev`."""
import json
import subprocess
import sys

import ledgermq

from ..sim.test_raft_sim import BUG_BREAKS as RAFT_BUG_BREAKS


def cli(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "ledgermq", *map(str, args)], capture_output=True,
                       text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_produce_consume_and_admin_commands(dev):
    d = dev()
    ns = ["-n", d.namesrv]
    sent = json.loads(cli("produce", *ns, "-t", "CliTopic", "--count", 6, "--body", "hello {i}",
                          "--tags", "t", "--keys", "k{i}", "--json").stdout)
    assert sent["sent"] == 6 and sent["statuses"] == {"SEND_OK": 6}
    lines = cli("consume", *ns, "-t", "CliTopic", "-g", "cg", "--from-beginning",
                "--json").stdout.splitlines()
    assert sorted(json.loads(x)["body"] for x in lines) == [f"hello {i}" for i in range(6)]
    progress = json.loads(cli("admin", "consumerProgress", *ns, "-g", "cg", "--json").stdout)
    assert sum(r["diff"] for r in progress) == 0 and sum(r["brokerOffset"] for r in progress) == 6
    assert "CliTopic" in json.loads(cli("admin", "topicList", *ns, "--json").stdout)
    cli("admin", "updateTopic", *ns, "-t", "Made", "-c", "DefaultCluster", "-r", 2, "-w", 2)
    route = json.loads(cli("admin", "topicRoute", *ns, "-t", "Made", "--json").stdout)
    assert route["queueDatas"][0]["writeQueueNums"] == 2
    table = cli("admin", "topicRoute", *ns, "-t", "Made").stdout
    assert "write queues" in table and f"0: {d.broker}" in table
    by_key = json.loads(cli("admin", "queryMsgByKey", *ns, "-t", "CliTopic", "-k", "k3",
                            "--json").stdout)
    assert [m["body"] for m in by_key] == ["hello 3"]
    offset_id = sent["first"]["offsetMsgId"]
    by_id = json.loads(cli("admin", "queryMsgById", *ns, "-i", offset_id, "--json").stdout)
    assert by_id["body"] == "hello 0"
    status = json.loads(cli("admin", "brokerStatus", *ns, "-b", d.broker, "--json").stdout)
    assert status["brokerName"] == "broker-a"
    direct = cli("consume", "-t", "CliTopic", "--broker", d.broker, "--from-beginning",
                 "--count", 2, "--json").stdout.splitlines()
    assert len(direct) == 2


def test_bad_input_gives_clear_errors(dev, tmp_path):
    d = dev()
    bad = cli("admin", "queryMsgById", "-n", d.namesrv, "-i", "zz", check=False)
    assert bad.returncode != 0 and "not hex" in bad.stderr
    missing = cli("admin", "topicRoute", "-n", d.namesrv, "-t", "Nope", check=False)
    assert missing.returncode != 0 and "TOPIC_NOT_EXIST" in missing.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SOMETIMES\n")
    wrong = cli("broker", "-c", conf, check=False)
    assert wrong.returncode == 2 and "flushDiskType" in wrong.stderr
    down = cli("produce", "-n", "127.0.0.1:1", "-t", "X", "--body", "x", check=False)
    assert down.returncode != 0 and "name server" in down.stderr.lower()


def test_sim_command_reports_and_replays():
    ok = json.loads(cli("sim", "--seeds", 3, "--steps", 1500, "--json").stdout)
    assert ok["failures"] == 0 and ok["seeds_run"] == 3
    caught = cli("sim", "--seeds", 50, "--steps", 3000, "--inject-bug", "commit-past-end",
                 "--json", check=False)
    assert caught.returncode == 1
    failure = json.loads(caught.stdout)["failed"][0]
    assert failure["invariant"] == RAFT_BUG_BREAKS["commit-past-end"], failure["violation"]
    assert failure["trace"] and "--inject-bug commit-past-end" in failure["replay"]
    listed = cli("sim", "--list-bugs").stdout
    assert "commit-old-term" in listed


def test_wrong_addresses_and_ids_are_named_in_one_line(dev, tmp_path):
    """What a new user types wrong gets a message saying what was expected."""
    d = dev()
    no_port = cli("produce", "-n", "localhost", "-t", "X", "--body", "x", check=False)
    assert no_port.returncode != 0 and "expected host:port" in no_port.stderr, no_port.stderr
    at_broker = cli("admin", "topicList", "-n", d.broker, check=False)
    assert at_broker.returncode != 0 and "not a name server" in at_broker.stderr, \
        at_broker.stderr
    for action in ("status", "down"):
        none = cli("cluster", action, "--dir", tmp_path / "nothing", check=False)
        assert none.returncode != 0 and "Traceback" not in none.stderr, none.stderr
        assert "no cluster" in none.stderr and "cluster up" in none.stderr, none.stderr


def test_query_msg_by_id_takes_either_id(dev):
    """produce shows the client's msgId and the broker's offsetMsgId; either finds it."""
    ns = ["-n", dev().namesrv]
    sent = json.loads(cli("produce", *ns, "-t", "Ids", "--body", "find me", "--json").stdout)
    r = sent["first"]
    text = cli("produce", *ns, "-t", "Ids", "--body", "again").stdout
    assert "msgId=" in text and "offsetMsgId=" in text
    for msg_id in (r["msgId"], r["offsetMsgId"]):
        got = cli("admin", "queryMsgById", *ns, "-i", msg_id, "--json", check=False)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["body"] == "find me"


def test_version_and_misspelled_config_keys(dev):
    version = cli("--version").stdout
    assert "ledgermq" in version and ledgermq.__version__ in version
    d = dev(conf={"flushDiskTyp": "SYNC_FLUSH", "LISTENPORT": "0"})
    assert d.ready["unknownKeys"] == \
        "LISTENPORT (did you mean listenPort?), flushDiskTyp (did you mean flushDiskType?)"
    log = (d.data / "dev.log").read_text()
    assert "flushDiskTyp (did you mean flushDiskType?)" in log


def test_produce_pipelines_and_summarizes(dev):
    """Many sends are in flight at once; --json is a summary, --json-each every result."""
    ns = ["-n", dev().namesrv]
    summary = json.loads(cli("produce", *ns, "-t", "Many", "--count", 3000, "--body", "m{i}",
                             "--json").stdout)
    assert summary["statuses"] == {"SEND_OK": 3000} and "results" not in summary
    assert summary["msgs_per_s"] > 0 and summary["last"]["status"] == "SEND_OK"
    each = cli("produce", *ns, "-t", "Many", "--count", 5, "--body", "e{i}", "--json-each")
    assert [json.loads(x)["status"] for x in each.stdout.splitlines()] == ["SEND_OK"] * 5
    text = cli("produce", *ns, "-t", "Many", "--count", 50, "--body", "t{i}").stdout
    assert "msgs/s" in text and "SEND_OK 50" in text
    got = cli("consume", *ns, "-t", "Many", "-g", "all", "--json").stdout.splitlines()
    assert sorted(json.loads(x)["body"] for x in got) == sorted(
        [f"m{i}" for i in range(3000)] + [f"e{i}" for i in range(5)] +
        [f"t{i}" for i in range(50)])


def on_a_terminal(*args) -> str:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe); what the terminal got."""
    import os
    import pty
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "ledgermq", *map(str, args)],
                           stdout=subprocess.PIPE, stderr=slave, timeout=60,
                           env={**os.environ, "COLUMNS": "120"})
        os.close(slave)
        slave = None
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not data:
                break
            chunks.append(data)
        assert p.returncode == 0
        return b"".join(chunks).decode(errors="replace")
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)


def test_long_runs_show_progress_on_a_terminal(dev):
    ns = ["-n", dev().namesrv]
    sending = on_a_terminal("produce", *ns, "-t", "Bar", "--count", 20000, "--body", "b{i}")
    assert "sending to Bar" in sending and "msgs/s" in sending
    reading = on_a_terminal("consume", *ns, "-t", "Bar", "-g", "bar", "--count", 20000)
    assert "reading Bar" in reading and "msgs/s" in reading


def test_produce_never_ignores_an_explicit_option_or_an_empty_stdin():
    """#30: `produce --count 100` without --body read stdin and, with stdin empty, sent 0
    messages and exited 0. Both are now clear usage errors, before any connection."""
    for args, stdin, said in [(["--count", "100"], "", "--count needs --body"),
                              ([], "", "stdin was empty")]:
        r = subprocess.run([sys.executable, "-m", "ledgermq", "produce", "-n", "127.0.0.1:1",
                            "-t", "T", *args], input=stdin, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and said in r.stderr, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr
