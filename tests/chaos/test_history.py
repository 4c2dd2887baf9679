"""The workload's history as JSON lines: what a run writes is what the checker reads back,
and a run that crashed mid-line still leaves a usable history."""
import orjson
import pytest

from ledgermq.chaos.history import History, HistoryError, HistoryWriter, load


def write_sample(path):
    with HistoryWriter(path) as w:
        w.meta(mode="dledger", seed=7)
        w.invoke("m1", key="k1", topic="T", broker="g0", queue=2, orderly=True, at=1.0)
        w.complete("m1", "ok", status="SEND_OK", broker="g0", queue=2, offset=10, at=1.25)
        w.invoke("m2", key="k2", topic="T", at=1.5)
        w.complete("m2", "fail", error="NO_ROUTE", at=1.6)
        w.invoke("m3", key="k3", topic="T", at=2.0)
        w.complete("m3", "info", error="timeout", at=5.0)
        w.invoke("m4", key="k4", topic="T", at=2.5)  # never completed: the run crashed
        n = w.fault_start("partition:isolate", ["n1"], at=3.0)
        w.fault_end(n, at=4.0)
        w.fault_start("kill", ["n2"], at=6.0)  # never healed
        w.drain_start(at=7.0)
        w.read("m1", topic="T", broker="g0", queue=2, offset=10, reader="group", at=1.3)
        w.read("m3", topic="T", broker="g0", queue=1, offset=4, reader="drain", at=7.5)
        w.drain_end(at=8.0)


def test_a_history_round_trips_through_its_json_lines(tmp_path):
    path = tmp_path / "history.jsonl"
    write_sample(path)
    h = load(path)
    assert h.facts == {"mode": "dledger", "seed": 7}
    m1 = h.attempts["m1"]
    assert (m1.key, m1.topic, m1.broker, m1.queue, m1.orderly) == ("k1", "T", "g0", 2, True)
    assert (m1.outcome, m1.status, m1.offset) == ("ok", "SEND_OK", 10)
    assert m1.latency == pytest.approx(0.25)
    assert (h.attempts["m2"].outcome, h.attempts["m2"].error) == ("fail", "NO_ROUTE")
    assert (h.attempts["m3"].outcome, h.attempts["m3"].completed) == ("info", 5.0)
    m4 = h.attempts["m4"]  # invoked, no completion: indeterminate, no latency
    assert (m4.outcome, m4.completed, m4.latency) == ("info", None, None)
    assert [(r.id, r.queue, r.offset, r.reader, r.at) for r in h.reads] == [
        ("m1", 2, 10, "group", 1.3), ("m3", 1, 4, "drain", 7.5)]
    assert [(f.name, f.nodes, f.start, f.end) for f in h.faults] == [
        ("partition:isolate", ("n1",), 3.0, 4.0), ("kill", ("n2",), 6.0, None)]
    assert h.drain == (7.0, 8.0) and h.notes == []


def test_each_record_is_one_json_line_written_at_once(tmp_path):
    """Appended line by line (no buffer to lose): every line is a whole JSON object as soon
    as the call returns, even before the writer is closed."""
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path)
    w.invoke("a", topic="T", at=0.5)
    lines = path.read_bytes().splitlines()
    assert [orjson.loads(x)["id"] for x in lines] == ["a"]
    w.close()


def test_a_torn_last_line_is_ignored_with_a_note(tmp_path):
    path = tmp_path / "h.jsonl"
    write_sample(path)
    whole = load(path)
    with open(path, "ab") as f:
        f.write(b'{"t":"invoke","id":"m9","top')  # the run died mid-write
    h = load(path)
    assert set(h.attempts) == set(whole.attempts) and len(h.reads) == len(whole.reads)
    assert len(h.notes) == 1 and "torn last line" in h.notes[0] and "ignored" in h.notes[0]


def test_a_bad_line_before_the_end_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'{"t":"invoke","id":"a","topic":"T","at":1}\nnot json\n'
                     b'{"t":"invoke","id":"b","topic":"T","at":2}\n')
    with pytest.raises(HistoryError, match="line 2"):
        load(path)
    path.write_bytes(b'{"t":"bogus","at":1}\n{"t":"invoke","id":"b","topic":"T","at":2}\n')
    with pytest.raises(HistoryError, match="line 1.*bogus"):
        load(path)


def test_a_completion_without_its_invoke_is_an_error(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'{"t":"complete","id":"x","outcome":"ok","at":1}\n')
    with pytest.raises(HistoryError, match="line 1.*x.*never invoked"):
        load(path)


def test_the_writer_refuses_what_the_checker_could_not_read(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl") as w:
        with pytest.raises(ValueError, match="outcome must be one of"):
            w.complete("a", "maybe", at=1.0)
        w.invoke("a", topic="T", at=1.0)
        with pytest.raises(ValueError, match="a already invoked"):
            w.invoke("a", topic="T", at=2.0)
        with pytest.raises(ValueError, match="no fault window 5"):
            w.fault_end(5, at=1.0)


def test_times_default_to_seconds_since_the_writer_opened(tmp_path):
    now = [100.0]
    with HistoryWriter(tmp_path / "h.jsonl", clock=lambda: now[0]) as w:
        now[0] = 102.5
        w.invoke("a", topic="T")
        now[0] = 103.0
        w.complete("a", "ok")
    a = load(tmp_path / "h.jsonl").attempts["a"]
    assert (a.invoked, a.completed) == (2.5, 3.0)


def test_a_history_is_built_in_memory_the_same_way():
    h = History()
    h.invoke("a", topic="T", at=1.0)
    h.complete("a", "ok", at=2.0)
    h.read("a", topic="T", queue=0, offset=0, reader="drain", at=3.0)
    assert h.attempts["a"].latency == 1.0 and h.reads[0].id == "a"


def test_writers_on_many_threads_leave_every_record_whole(tmp_path):
    """Producers record from their own threads: each line is written whole, so the file
    reads back with every attempt and its outcome, and checks the same as the memory copy."""
    import threading

    from ledgermq.chaos.checker import check

    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.drain_start()  # the reads below are the drain's (it counts what is in the log)

        def producer(p):
            for i in range(500):
                m = f"p{p}-{i}"
                w.invoke(m, topic="T", key=f"k{p}", queue=p, orderly=True)
                w.complete(m, "ok", status="SEND_OK", queue=p, offset=i)
                w.read(m, topic="T", reader="drain", queue=p, offset=i)
        threads = [threading.Thread(target=producer, args=(p,)) for p in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.drain_end()
    h = load(path)
    assert len(h.attempts) == 2000 and h.notes == []
    assert all(a.outcome == "ok" and a.latency >= 0 for a in h.attempts.values())
    r = check(h)
    assert r["valid"] and r["order"]["keys"] == 4 and r["reads"]["total"] == 2000
    assert r == check(w.history)
