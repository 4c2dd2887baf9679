"""The chaos workload's second producer: RocketMQ's C++ client (PyPI rocketmq==0.4.4), run
as `python cpp_producer.py NAMESRV TOPIC RATE PREFIX` by a Python that has it (never
imported by ledgermq: it needs that client's venv). Sends keyed messages `PREFIX-000001`,
... at RATE per second from a few threads (a hung send does not stop the others) until its
stdin closes, then lets the sends in flight finish and exits. One JSON line per event on
stdout: {"i": key} before a send, {"c": key, "status": N, "offset": N} after one answered,
{"e": key, "error": text} after one failed (the client retried it inside: its fate is
unknown)."""
import json
import sys
import threading
import time

from rocketmq.client import Message, Producer

THREADS = 4
_out = threading.Lock()


def emit(rec: dict) -> None:
    with _out:
        sys.stdout.write(json.dumps(rec) + "\n")
        sys.stdout.flush()


def sender(p, topic: str, prefix: str, k: int, period: float, stop: threading.Event) -> None:
    nxt = time.monotonic()
    for i in range(k, 1 << 62, THREADS):
        if stop.is_set():
            return
        key = f"{prefix}-{i:07d}"
        m = Message(topic)
        m.set_keys(key)
        m.set_body(key)
        emit({"i": key})
        try:
            r = p.send_sync(m)
            emit({"c": key, "status": int(r.status), "offset": r.offset})
        except Exception as e:  # noqa: BLE001 - every failure is recorded, none stops us
            emit({"e": key, "error": f"{type(e).__name__}: {e}"[:200]})
        nxt += period
        stop.wait(max(0.0, nxt - time.monotonic()))


def main() -> None:
    namesrv, topic, rate, prefix = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    p = Producer(f"chaos-cpp-{prefix}", timeout=3000)
    p.set_namesrv_addr(namesrv)
    p.start()
    stop = threading.Event()
    threads = [threading.Thread(target=sender, args=(p, topic, prefix, k, THREADS / rate, stop))
               for k in range(THREADS)]
    for t in threads:
        t.start()
    sys.stdin.read()  # until the workload closes it
    stop.set()
    for t in threads:
        t.join()
    p.shutdown()


if __name__ == "__main__":
    main()
