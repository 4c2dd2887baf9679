"""Runs inside the rocketmq==0.4.4 venv (the C++ client); prints one JSON document.

    python cpp_client_worker.py NAMESRV produce TOPIC N
    python cpp_client_worker.py NAMESRV orderly TOPIC N
    python cpp_client_worker.py NAMESRV batch TOPIC N
    python cpp_client_worker.py NAMESRV push TOPIC GROUP EXPECTED TIMEOUT_S
    python cpp_client_worker.py NAMESRV pull TOPIC GROUP
    python cpp_client_worker.py NAMESRV oneway TOPIC N
    python cpp_client_worker.py NAMESRV delay TOPIC N        (delay level 1)
    python cpp_client_worker.py NAMESRV timer TOPIC N        (TIMER_DELAY_SEC=2, RocketMQ 5)
    python cpp_client_worker.py NAMESRV pushorderly TOPIC GROUP EXPECTED TIMEOUT_S
    python cpp_client_worker.py NAMESRV trysend TOPIC      (one send; what came of it)
    python cpp_client_worker.py NAMESRV retry TOPIC GROUP EXPECTED TIMEOUT_S
        (the first delivery of every message fails, so each comes back once; copies
        that came back are consumed)
"""
import json
import sys
import threading
import time
from pathlib import Path

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's tests/
from tests.wait import wait_until  # noqa: E402


def credentials(client):
    """ACL: CPP_ACCESS_KEY / CPP_SECRET_KEY in the environment sign every request."""
    import os
    if os.environ.get("CPP_ACCESS_KEY"):
        client.set_session_credentials(os.environ["CPP_ACCESS_KEY"],
                                       os.environ["CPP_SECRET_KEY"], "ALIYUN")


def message(topic, i, tag):
    m = Message(topic)
    m.set_keys("key-%d" % i)
    m.set_tags(tag)
    m.set_body("body-%d" % i)
    return m


def received(msg):
    return {"body": msg.body.decode(), "keys": msg.keys.decode() if isinstance(msg.keys, bytes)
            else msg.keys, "tags": msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags,
            "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "id": msg.id}


def wait_stored(ns, topic, n):
    """Until the broker holds `n` messages of `topic` (read by a consumer of our own)."""
    c = PullConsumer("stored-" + topic)
    c.set_namesrv_addr(ns)
    c.start()
    count = [0]

    def stored():
        count[0] += sum(1 for _ in c.pull(topic))
        return count[0] >= n
    try:
        wait_until(stored, "%d messages stored in %s" % (n, topic), 30)
    finally:
        c.shutdown()


def main():
    ns, mode, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    out = {"mode": mode}
    if mode == "trysend":
        p = Producer("PID-compat-acl", timeout=5000)
        p.set_namesrv_addr(ns)
        credentials(p)
        p.start()
        try:
            r = p.send_sync(message(topic, 0, "acl"))
            out.update(ok=int(r.status) == 0, status=int(r.status))
        except Exception as e:  # noqa: BLE001 - the refusal is the result
            out.update(ok=False, error="%s: %s" % (type(e).__name__, e))
        p.shutdown()
    elif mode in ("produce", "orderly", "batch", "oneway", "delay", "timer"):
        n = int(sys.argv[4])
        p = Producer("PID-compat-" + mode, timeout=5000)
        p.set_namesrv_addr(ns)
        p.start()
        results = []
        if mode == "produce":
            for i in range(n):
                r = p.send_sync(message(topic, i, "tag-%d" % (i % 3)))
                results.append([int(r.status), r.msg_id, r.offset])
        elif mode == "orderly":
            for i in range(n):
                r = p.send_orderly(message(topic, i, "ordered"), 7)
                results.append([int(r.status), r.msg_id, r.offset])
        elif mode == "oneway":
            for i in range(n):
                p.send_oneway(message(topic, i, "oneway"))
            wait_stored(ns, topic, n)  # one-way: no answer; the producer stays up till then
        elif mode == "delay":
            for i in range(n):
                m = message(topic, i, "delayed")
                m.set_delay_time_level(1)
                r = p.send_sync(m)
                results.append([int(r.status), r.msg_id, r.offset, time.time()])
        elif mode == "timer":
            for i in range(n):
                m = message(topic, i, "timed")
                m.set_property("TIMER_DELAY_SEC", "2")
                r = p.send_sync(m)
                results.append([int(r.status), r.msg_id, r.offset, time.time()])
        else:
            for start in range(0, n, 10):
                r = p.send_batch([message(topic, i, "batched") for i in range(start, min(n, start + 10))])
                results.append([int(r.status), r.msg_id, r.offset])
        p.shutdown()
        out["results"] = results
    elif mode in ("push", "pushorderly", "retry"):
        group, expected, timeout = sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
        got, errors, lock, failed_once = [], [], threading.Lock(), set()

        def on_message(msg):
            with lock:
                body = msg.body
                if mode == "retry" and msg.reconsume_times == 0:
                    if body not in failed_once:
                        failed_once.add(body)
                        # -> RECONSUME_LATER for the whole batch the client passed in,
                        # although its C API called us with the first message only
                        raise RuntimeError("first delivery fails")
                    # the client consumes again by itself when its send-back timed out
                    # (a loaded machine): what counts is the copy the broker sends back
                    return
                try:
                    item = received(msg)
                except Exception as e:  # the client would only say "consume fail"
                    errors.append(repr(e))
                    raise
                item["reconsume_times"] = msg.reconsume_times
                item["at"] = time.time()
                got.append(item)  # returning normally acknowledges
        c = PushConsumer(group, orderly=(mode == "pushorderly"))
        c.set_namesrv_addr(ns)
        c.subscribe(topic, on_message)
        c.start()
        end = time.time() + timeout
        while time.time() < end:
            with lock:
                if len(got) >= expected:
                    break
            time.sleep(0.2)
        time.sleep(1.0)  # late duplicates would show up here (a while to watch, not a wait)
        c.shutdown()
        out["messages"], out["errors"] = got, errors
    elif mode == "pull":
        group = sys.argv[4]
        c = PullConsumer(group)
        c.set_namesrv_addr(ns)
        c.start()
        out["messages"] = [received(m) for m in c.pull(topic, max_num=32)]
        c.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
