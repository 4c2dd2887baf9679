"""One process of bench/request_bench.py: RocketMQ's C++ client (PyPI rocketmq==0.4.4, run
by the Python that has it) sending 100-byte messages one per request, synchronously, from
one thread. `python cpp_sync_sender.py NAMESRV TOPIC START END` (wall-clock epoch seconds,
the same for every process of a run): sends until END, timing the sends made from START
on, then prints one JSON line {"msgs", "failed", "lat_ms": [sorted latencies]}."""
import json
import sys
import time

from rocketmq.client import Message, Producer


def main() -> None:
    namesrv, topic, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
        float(sys.argv[4])
    p = Producer(f"bench-req-{time.monotonic_ns()}", timeout=3000)
    p.set_namesrv_addr(namesrv)
    p.start()
    body = b"x" * 100
    lats, failed = [], 0
    while True:
        now = time.time()
        if now >= end:
            break
        timed = now >= start
        m = Message(topic)
        m.set_body(body)
        t0 = time.perf_counter()
        try:
            p.send_sync(m)
            ok = True
        except Exception:  # noqa: BLE001 - counted, the run goes on
            ok = False
        if timed:
            if ok:
                lats.append((time.perf_counter() - t0) * 1000)
            else:
                failed += 1
    p.shutdown()
    lats.sort()
    print(json.dumps({"msgs": len(lats), "failed": failed, "lat_ms": lats}), flush=True)


if __name__ == "__main__":
    main()
