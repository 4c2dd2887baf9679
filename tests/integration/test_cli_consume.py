"""`ledgermq consume` commits exactly what it showed: no more (a stop in the middle of a
pulled batch), and nothing for queues it did not read."""
import json

from .test_cli import cli


def progress(ns, group) -> dict[int, int]:
    rows = json.loads(cli("admin", "consumerProgress", *ns, "-g", group, "--json").stdout)
    return {r["queueId"]: r["consumerOffset"] for r in rows}


def bodies(out: str) -> list[str]:
    return [json.loads(x)["body"] for x in out.splitlines()]


def test_consume_count_commits_up_to_the_last_message_shown(dev):
    ns = ["-n", dev().namesrv]
    cli("admin", "updateTopic", *ns, "-t", "OneQueue", "-c", "DefaultCluster", "-r", 1, "-w", 1)
    cli("produce", *ns, "-t", "OneQueue", "--count", 5, "--body", "m{i}")
    first = bodies(cli("consume", *ns, "-t", "OneQueue", "-g", "g1", "--count", 1,
                       "--json").stdout)
    rest = bodies(cli("consume", *ns, "-t", "OneQueue", "-g", "g1", "--json").stdout)
    assert first + rest == [f"m{i}" for i in range(5)]  # nothing skipped, nothing twice


def test_consume_from_beginning_touches_only_the_queues_it_read(dev):
    ns = ["-n", dev().namesrv]
    cli("admin", "updateTopic", *ns, "-t", "FourQueues", "-c", "DefaultCluster", "-r", 4,
        "-w", 4)
    cli("produce", *ns, "-t", "FourQueues", "--count", 40, "--body", "m{i}")
    assert len(bodies(cli("consume", *ns, "-t", "FourQueues", "-g", "g2",
                          "--json").stdout)) == 40
    before = progress(ns, "g2")
    shown = cli("consume", *ns, "-t", "FourQueues", "-g", "g2", "--from-beginning",
                "--count", 1, "--json").stdout.splitlines()
    read = json.loads(shown[0])
    after = progress(ns, "g2")
    assert after[read["queueId"]] == read["queueOffset"] + 1  # up to the message shown
    assert {q: o for q, o in after.items() if q != read["queueId"]} == \
        {q: o for q, o in before.items() if q != read["queueId"]}  # the others untouched


def test_consume_with_an_sql_filter_shows_only_what_it_selects(dev):
    ns = ["-n", dev().namesrv]
    cli("produce", *ns, "-t", "Mixed", "--count", 4, "--body", "a{i}", "--tags", "a")
    cli("produce", *ns, "-t", "Mixed", "--count", 3, "--body", "b{i}", "--tags", "b")
    got = bodies(cli("consume", *ns, "-t", "Mixed", "-g", "sql", "--sql", "TAGS = 'b'",
                     "--json").stdout)
    assert sorted(got) == ["b0", "b1", "b2"]
