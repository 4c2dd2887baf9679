"""A TCP echo server and clients for the test-host tests; stdlib only, so it starts fast
inside a namespace (`host.popen([sys.executable, netprobe.__file__, ...])`):

    netprobe.py serve ADDR PORT             echo on ADDR:PORT; prints "ready" when listening
    netprobe.py reach TIMEOUT ADDR:PORT...  one echo with each, concurrently; prints a JSON
                                            object {target: "ok" or the error}
    netprobe.py hold ADDR:PORT              one connection, kept: prints "up", then for each
                                            stdin line "echo TIMEOUT" prints "ok" or "stalled"
The test process itself uses `echo_once` and `Conn` for the clients on the root side.
"""
from __future__ import annotations

import json
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def serve(addr: str, port: int) -> None:
    srv = socket.create_server((addr, port), reuse_port=True)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_echo, args=(conn,), daemon=True).start()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


class Conn:
    """A kept connection to an echo server: each `echo` sends a byte and waits until every
    byte sent so far came back (so one stalled during a cut is counted once it arrives)."""

    def __init__(self, addr: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((addr, port), timeout=timeout)
        self.sent = self.received = 0

    def echo(self, timeout: float) -> float | None:
        """Seconds the round trip took, or None when nothing came back within `timeout`."""
        start = time.monotonic()
        self.sock.sendall(b"x")
        self.sent += 1
        while self.received < self.sent:
            left = start + timeout - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                got = self.sock.recv(4096)
            except TimeoutError:
                return None
            if not got:
                raise ConnectionError("the echo server closed the connection")
            self.received += len(got)
        return time.monotonic() - start

    def close(self) -> None:
        self.sock.close()


def echo_once(addr: str, port: int, timeout: float) -> str:
    """"ok" when a new connection echoes a byte within `timeout`, else the error."""
    try:
        c = Conn(addr, port, timeout)
        try:
            return "ok" if c.echo(timeout) is not None else "no echo (timed out)"
        finally:
            c.close()
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def _target(s: str) -> tuple[str, int]:
    addr, _, port = s.rpartition(":")
    return addr, int(port)


def main(argv: list[str]) -> None:
    cmd = argv[0]
    if cmd == "serve":
        serve(argv[1], int(argv[2]))
    elif cmd == "reach":
        timeout, targets = float(argv[1]), argv[2:]
        with ThreadPoolExecutor(len(targets)) as pool:
            results = pool.map(lambda t: echo_once(*_target(t), timeout), targets)
            print(json.dumps(dict(zip(targets, results))), flush=True)
    elif cmd == "hold":
        c = Conn(*_target(argv[1]))
        print("up", flush=True)
        for line in sys.stdin:
            rtt = c.echo(float(line.split()[1]))
            print("ok" if rtt is not None else "stalled", flush=True)
    else:
        sys.exit(f"netprobe: unknown command {cmd!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
