"""Runs inside the rocketmq-python-client==5.1.2 venv (RocketMQ 5's official Python client,
gRPC); does one scenario's client side and prints one JSON document of what it saw.

    python v5_client_worker.py ENDPOINT produce TOPIC N KIND   (KIND: normal fifo delay)
    python v5_client_worker.py ENDPOINT consume GROUP TOPIC N TIMEOUT_S [TAG]
    python v5_client_worker.py ENDPOINT redeliver GROUP TOPIC
    python v5_client_worker.py ENDPOINT fifo GROUP TOPIC
    python v5_client_worker.py ENDPOINT transaction TOPIC
    python v5_client_worker.py ENDPOINT push GROUP TOPIC N TIMEOUT_S
    python v5_client_worker.py ENDPOINT pushfifo GROUP TOPIC N TIMEOUT_S
    python v5_client_worker.py ENDPOINTS failover GROUP TOPIC SECONDS PROGRESS_FILE
    python v5_client_worker.py ENDPOINTS hold GROUP TOPIC N   (acks the second half only)
"""
import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
    MessageListener, Producer, PushConsumer, SimpleConsumer, TransactionChecker,
    TransactionResolution,
)


# V5_TLS=1: connect with TLS (trusting the CA file GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names)
TLS = os.environ.get("V5_TLS") == "1"


def config(endpoint):
    """V5_ACCESS_KEY / V5_SECRET_KEY in the environment: the client signs its calls."""
    creds = Credentials(os.environ.get("V5_ACCESS_KEY", ""), os.environ.get("V5_SECRET_KEY", ""))
    return ClientConfiguration(endpoint, creds, request_timeout=10)


def message(topic, body, tag="TagA", keys=None, group=None, deliver_at_s=None, **props):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = tag
    if keys:
        m.keys = keys
    if group:
        m.message_group = group
    if deliver_at_s:
        m.delivery_timestamp = deliver_at_s
    for k, v in props.items():
        m.add_property(k, v)
    return m


def seen(m):
    return {"body": m.body.decode(), "id": m.message_id, "tag": m.tag, "keys": sorted(m.keys),
            "group": m.message_group, "attempt": m.delivery_attempt,
            "properties": dict(m.properties), "at": time.time()}


def produce(endpoint, topic, n, kind):
    p = Producer(config(endpoint), (topic,), tls_enable=TLS)
    p.startup()
    out = []
    try:
        for i in range(int(n)):
            extra = {}
            if kind == "fifo":
                extra["group"] = "g%d" % (i % 2)
            if kind == "delay":  # this client puts it in the Timestamp's seconds as is
                extra["deliver_at_s"] = int(time.time()) + 4
            r = p.send(message(topic, "%s-%d" % (kind, i), keys="key-%d" % i, color="red",
                               **extra))
            out.append({"id": r.message_id, "offset": r.offset, "sent_at": time.time(),
                        "due": extra.get("deliver_at_s")})
    finally:
        p.shutdown()
    return {"receipts": out}


def simple(endpoint, group, topic, tag="*", await_s=2):
    c = SimpleConsumer(config(endpoint), group, {topic: FilterExpression(tag)},
                       await_duration=await_s, tls_enable=TLS)
    c.startup()
    return c


def consume(endpoint, group, topic, n, timeout, tag="*"):
    c = simple(endpoint, group, topic, tag)
    got, end = [], time.time() + float(timeout)
    try:
        while len(got) < int(n) and time.time() < end:
            try:
                batch = c.receive(16, 15)
            except Exception as e:
                # RocketMQ's own proxy refuses a receive that comes before it has the
                # client's settings, which this client does not wait for (an NPE,
                # apache/rocketmq#8714): as a client would, try again shortly
                if "settings" not in str(e) or time.time() > end:
                    raise
                time.sleep(0.2)  # (a retry's pause, not a wait for an event)
                continue
            for m in batch:
                got.append(seen(m))
                c.ack(m)
    finally:
        c.shutdown()
    return {"messages": got}


def redeliver(endpoint, group, topic):
    """Receive one message and let it expire (2 s); it comes back with delivery attempt 2;
    its first handle is stale then. Extend the second delivery, which then stays away."""
    c = simple(endpoint, group, topic)
    out = {}
    try:
        first = wait_for(lambda: c.receive(1, 2), 20)
        out["first"] = seen(first[0])
        again = wait_for(lambda: c.receive(1, 2), 30)
        out["again"] = seen(again[0])
        try:
            c.ack(first[0])
            out["stale_ack"] = "accepted"
        except Exception as e:  # noqa: BLE001 - what the client raised is the result
            out["stale_ack"] = "%s: %s" % (type(e).__name__, e)
        c.change_invisible_duration(again[0], 20)
        time.sleep(4)  # past the first 2 s: without the change it would be back by now
        out["after_change"] = [seen(m) for m in c.receive(1, 2)]
        c.ack(again[0])
    finally:
        c.shutdown()
    return out


def fifo(endpoint, group, topic):
    """One message received and not acked (3 s invisible); then receive and ack the rest:
    its message group's queue holds back until it is delivered again."""
    c = simple(endpoint, group, topic)
    order = []
    try:
        held = wait_for(lambda: c.receive(1, 3), 20)[0]
        order.append(seen(held))
        end = time.time() + 40
        while time.time() < end and not (len({m["body"] for m in order}) >= 10 and
                                         sum(m["body"] == order[0]["body"] for m in order) > 1):
            for m in c.receive(16, 3):
                order.append(seen(m))
                c.ack(m)
    finally:
        c.shutdown()
    return {"order": order}


class Checker(TransactionChecker):
    def __init__(self):
        self.asked = []

    def check(self, message):
        self.asked.append({"id": message.message_id, "at": time.time()})
        return TransactionResolution.COMMIT


def transaction(endpoint, topic):
    """Three half messages: committed, rolled back, and left open (the broker asks)."""
    checker = Checker()
    p = Producer(config(endpoint), (topic,), checker, tls_enable=TLS)
    p.startup()
    out = {}
    try:
        for name, decide in (("commit", "commit"), ("rollback", "rollback"), ("open", None)):
            tx = p.begin_transaction()
            r = p.send(message(topic, name), tx)
            out[name] = r.message_id
            if decide == "commit":
                tx.commit()
            elif decide == "rollback":
                tx.rollback()
        out["open_sent_at"] = time.time()
        wait_for(lambda: checker.asked, 30)
        out["asked"] = checker.asked
        # the checker's decision goes back asynchronously: keep the producer up until the
        # committed message reaches a consumer of another group
        watch = simple(endpoint, topic + "-watch", topic)
        try:
            wait_for(lambda: any(m.body == b"open" for m in watch.receive(16, 15)), 30)
        finally:
            watch.shutdown()
    finally:
        p.shutdown()
    return out


def push(endpoint, group, topic, n, timeout):
    """A push consumer whose first delivery of each message fails: each comes again."""
    got, lock, failed = [], threading.Lock(), set()

    class FailFirst(MessageListener):
        def consume(self, m):
            with lock:
                body = m.body.decode()
                if body not in failed:
                    failed.add(body)
                    return ConsumeResult.FAILURE
                got.append(seen(m))
                return ConsumeResult.SUCCESS
    return push_until(endpoint, group, topic, FailFirst(), got, n, timeout)


def pushfifo(endpoint, group, topic, n, timeout):
    """A push consumer of a FIFO group: what it is handed, in order; each message group's
    second message is slow, so a client not holding the group back would pass it."""
    got, lock = [], threading.Lock()

    class Slow(MessageListener):
        def consume(self, m):
            if m.body.decode() in ("fifo-2", "fifo-3"):
                time.sleep(0.5)
            with lock:
                got.append(seen(m))
            return ConsumeResult.SUCCESS
    return push_until(endpoint, group, topic, Slow(), got, n, timeout)


def push_until(endpoint, group, topic, listener, got, n, timeout):
    """Run a push consumer with `listener` until it has put `n` messages in `got`."""
    c = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression()},
                     tls_enable=TLS)
    c.startup()
    try:
        wait_for(lambda: len(got) >= int(n) or None, float(timeout))
    finally:
        c.shutdown()
    return {"messages": got}


def failover(endpoints, group, topic, seconds, progress):
    """Send one by one and receive-and-ack at once for `seconds` (a broker is killed
    meanwhile: errors are expected, counted and outlived), then receive until every
    acknowledged send came back. PROGRESS_FILE holds the number of acknowledged sends."""
    acked, received, errors = [], [], {"send": 0, "receive": 0}
    stop_sending = threading.Event()
    done = threading.Event()

    def produce_loop():
        p = Producer(config(endpoints), (topic,), tls_enable=TLS)
        p.startup()
        i = 0
        try:
            while not stop_sending.is_set():
                body = "f-%d" % i
                i += 1
                try:
                    p.send(message(topic, body))
                    acked.append({"body": body, "at": time.time()})
                    with open(progress, "w") as f:
                        f.write(str(len(acked)))
                except Exception:  # noqa: BLE001 - not acknowledged: may or may not be stored
                    errors["send"] += 1
                    time.sleep(0.2)
                time.sleep(0.02)
        finally:
            p.shutdown()

    def consume_loop():
        c = simple(endpoints, group, topic)
        try:
            while not done.is_set():
                try:
                    for m in c.receive(16, 10):
                        received.append({"body": m.body.decode(), "at": time.time()})
                        c.ack(m)
                except Exception:  # noqa: BLE001 - the master is gone: try again
                    errors["receive"] += 1
                    time.sleep(0.2)
        finally:
            c.shutdown()
    threads = [threading.Thread(target=produce_loop), threading.Thread(target=consume_loop)]
    for t in threads:
        t.start()
    time.sleep(float(seconds))
    stop_sending.set()
    threads[0].join()
    end = time.time() + 60
    while time.time() < end and not {a["body"] for a in acked} <= {r["body"] for r in received}:
        time.sleep(0.2)
    done.set()
    threads[1].join()
    return {"acked": acked, "received": received, "errors": errors}


def hold(endpoints, group, topic, n):
    """Receive N messages for 60 s each; ack the second half (by body number), keep the
    first half out."""
    c = simple(endpoints, group, topic)
    got = []
    try:
        end = time.time() + 30
        while len(got) < int(n) and time.time() < end:
            got += c.receive(int(n) - len(got), 60)
        acked = []
        for m in got:
            if int(m.body.decode().split("-")[1]) >= int(n) // 2:
                c.ack(m)  # raises unless the broker says the ack holds
                acked.append(m.body.decode())
    finally:
        c.shutdown()
    return {"received": [m.body.decode() for m in got], "acked": acked}


def wait_for(fn, timeout):
    end = time.time() + timeout
    while time.time() < end:
        r = fn()
        if r:
            return r
        time.sleep(0.1)
    raise TimeoutError("nothing within %ss" % timeout)


def main():
    endpoint, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    fn = {"produce": produce, "consume": consume, "redeliver": redeliver, "fifo": fifo,
          "transaction": transaction, "push": push, "pushfifo": pushfifo, "failover": failover,
          "hold": hold}[mode]
    print(json.dumps(fn(endpoint, *args)))


if __name__ == "__main__":
    main()
