"""`cluster up --tls` as real processes: every port enforces TLS (a plaintext client and a
plaintext peer are closed at once), clients that trust the cluster's CA send and read,
and replication runs over TLS: the bytes between a slave and its master, captured by a
proxy the test puts between them, do not show a message body (they do without TLS)."""
import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest

from ledgermq import Message, Producer, PullConsumer, PullStatus
from ledgermq.localcluster.cluster import down, free_ports, status, up
from ledgermq.client.admin import Admin
from ledgermq.localcluster.tls import cluster_client_tls
from ledgermq.remoting import RemotingError

from ..wait import until, wait_until


class CapturingProxy:
    """Forwards 127.0.0.1:port to a target set later; keeps what the target sent."""

    def __init__(self):
        self.port = free_ports(1)[0]
        self.target: tuple[str, int] | None = None
        self.from_target = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            if self.target is None:
                conn.close()  # the slave retries until the test knows the master's port
                continue
            upstream = socket.create_connection(self.target, timeout=3)
            for src, dst, keep in ((conn, upstream, False), (upstream, conn, True)):
                t = threading.Thread(target=self._pump, args=(src, dst, keep), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src, dst, keep):
        src.settimeout(0.2)
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                if keep:
                    with self._lock:
                        self.from_target += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def captured(self) -> bytes:
        with self._lock:
            return bytes(self.from_target)

    def close(self):
        self._stop.set()
        for t in self._threads:
            t.join(2)
        self._listener.close()


def procs(d):
    return {p["name"]: p for p in status(d)["processes"]}


def refused_at_once(port: int) -> bool:
    """A plaintext remoting frame to `port` is answered by closing the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(b"\x00\x00\x00\x10" + b"\x00" * 16)
        s.settimeout(3)
        t0 = time.monotonic()
        try:
            got = s.recv(1)
        except ConnectionResetError:
            got = b""
        return got == b"" and time.monotonic() - t0 < 2


async def send_and_read(namesrv, tls, bodies, topic="TlsTopic"):
    async with Admin(namesrv, tls=tls) as a:  # a master registered: routes to send by
        await until(a.master_addrs, "a master known to the name server", timeout=15)
    async with Producer("tls-p", namesrv, tls=tls) as p:
        for body in bodies:
            r = await p.send(Message(topic, body))
            assert r.status.value == "SEND_OK", r
    async with PullConsumer("tls-c", namesrv, tls=tls) as c:
        got = []
        for q in await c.fetch_queues(topic):
            r = await c.pull(q, 0, 100)
            if r.status is PullStatus.FOUND:
                got += [m.body for m in r.messages]
    return got


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_classic_ha_replicates_over_tls_and_refuses_plaintext(tmp_path, tls):
    proxy = CapturingProxy()  # the slave follows the master through it
    d = tmp_path / "ha"
    state = up("sync", 2, d, {"haMasterAddress": f"127.0.0.1:{proxy.port}"},
               tls="enforcing" if tls else "")
    try:
        master = procs(d)["n0"]
        proxy.target = ("127.0.0.1", master["replPort"])
        ctx = cluster_client_tls(state)
        assert (ctx is not None) == tls
        # the master counts the slave once its first report came through the proxy
        wait_until(lambda: any(s["push"] is not None for s in
                               procs(d)["n0"].get("ha", {}).get("slaves", [])),
                   lambda: f"the master serves its slave: {procs(d)}", 15)
        marker = b"TLS-BODY-MARKER-7f3a9c"
        got = asyncio.run(send_and_read(state["namesrv"], ctx or False, [marker] * 5))
        assert got == [marker] * 5  # a SYNC_MASTER answers SEND_OK once the slave has it
        wait_until(lambda: (p := procs(d))["n1"].get("ha", {}).get("maxOffset") ==
                   p["n0"].get("ha", {}).get("logEnd"), "the slave caught up", 15)
        captured = proxy.captured()
        assert len(captured) > 5 * len(marker)  # the messages went through the proxy
        assert (marker in captured) is not tls, len(captured)
        if tls:
            ports = [state["processes"][0]["port"], master["port"], master["replPort"]]
            assert all(refused_at_once(port) for port in ports)
            async def plaintext_send():
                async with Producer("plain-p", state["namesrv"], tls=False) as p:
                    await p.send(Message("TlsTopic", b"x"))
            with pytest.raises(RemotingError, match="enforcing"):
                asyncio.run(plaintext_send())
            log = (d / "namesrv" / "server.log").read_text()
            assert "closing plaintext connection" in log
    finally:
        down(d)
        proxy.close()


def test_dledger_group_replicates_over_tls(tmp_path):
    d = tmp_path / "dledger"
    state = up("dledger", 3, d, tls="enforcing")
    try:
        ctx = cluster_client_tls(state)
        wait_until(lambda: any(p.get("role") == "LEADER" for p in procs(d).values()),
                   lambda: f"a leader: {procs(d)}", 15)
        bodies = [f"tls-raft-{i}".encode() for i in range(20)]
        got = asyncio.run(send_and_read(state["namesrv"], ctx, bodies))
        assert sorted(got) == sorted(bodies)

        def all_at_one_commit():
            st = [p for p in procs(d).values() if "commit" in p]
            return len(st) == 3 and len({(p["commit"], p["end"]) for p in st}) == 1 and st
        st = wait_until(all_at_one_commit, "every replica at the leader's commit", 15)
        assert st[0]["end"] > 0
        # the raft ports refuse a plaintext peer
        assert all(refused_at_once(p["replPort"]) for p in state["processes"]
                   if "replPort" in p)
    finally:
        down(d)


@pytest.mark.slow  # ~5 s: the other modes' links (the default run has HA, DLedger)
def test_controller_mode_permissive_serves_both_and_links_use_tls(tmp_path):
    """Two controllers (raft between them), a master and a slave, all permissive with
    tls.enable: the brokers dial the controllers and each other with TLS, and a plaintext
    client (RocketMQ's C++ client has no TLS) and a TLS client share the cluster."""
    d = tmp_path / "ctl"
    state = up("controller", 2, d, controllers=2, tls="permissive")
    try:
        def caught_up():
            st = procs(d)
            master = next((p for p in st.values() if p.get("role") == "MASTER"), None)
            slave = next((p for p in st.values() if p.get("role") == "SLAVE"), None)
            return master and slave and \
                slave.get("ha", {}).get("maxOffset") == master["ha"]["logEnd"]
        wait_until(caught_up, lambda: f"a master and a caught-up slave: {procs(d)}", 20)
        ctx = cluster_client_tls(state)
        assert asyncio.run(send_and_read(state["namesrv"], False, [b"plain"])) == [b"plain"]
        got = asyncio.run(send_and_read(state["namesrv"], ctx, [b"tls"]))
        assert sorted(got) == [b"plain", b"tls"]
        wait_until(caught_up, "the slave has both", 10)
        logs = "".join((d / n / "server.log").read_text() for n in ("c0", "c1", "n0", "n1"))
        assert "TLS handshake" not in logs  # every link's handshake succeeded
    finally:
        down(d)


@pytest.mark.slow  # ~5 s: the other modes' links (the default run has HA, DLedger)
def test_checkpoint_mode_over_tls(tmp_path):
    """The control node, its brokers and their HA links, all enforcing TLS."""
    d = tmp_path / "cp"
    state = up("checkpoint", 2, d, {"syncFlushTimeout": "500"}, tls="enforcing")
    try:
        def caught_up():
            st = procs(d)
            master = next((p for p in st.values() if p.get("role") == "MASTER"), None)
            slave = next((p for p in st.values() if p.get("role") == "SLAVE"), None)
            return master and slave and \
                slave.get("ha", {}).get("maxOffset") == master["ha"]["logEnd"]
        wait_until(caught_up, lambda: f"a master and a caught-up slave: {procs(d)}", 20)
        ctx = cluster_client_tls(state)
        bodies = [f"cp-{i}".encode() for i in range(5)]
        assert sorted(asyncio.run(send_and_read(state["namesrv"], ctx, bodies))) == bodies
        assert refused_at_once(int(state["controlNode"].rsplit(":", 1)[1]))
    finally:
        down(d)


@pytest.mark.parametrize("command, conf, key", [
    ("namesrv", "tls.server.mode=strict\n", "tls.server.mode"),
    ("broker", "tls.server.mode=enforcing\ntls.server.certPath=/nonexistent/cert.pem\n"
               "tls.server.keyPath=/nonexistent/key.pem\n", "tls.server.certPath"),
    ("broker", "enableDLegerCommitLog=true\ndLegerPeers=n0-127.0.0.1:40911\n"
               "dLegerSelfId=n0\ntls.server.mode=enforcing\ntls.server.certPath={cert}\n"
               "tls.server.keyPath={key}\n", "tls.enable"),
])
def test_a_server_with_wrong_tls_settings_does_not_start(tmp_path, command, conf, key):
    from ledgermq.localcluster.certs import CertAuthority
    ca = CertAuthority.create(tmp_path / "pki")
    cert, key_file = ca.issue(tmp_path / "pki", "server")
    path = tmp_path / "server.conf"
    path.write_text(conf.format(cert=cert, key=key_file) +
                    f"storePathRootDir={tmp_path / 'store'}\nlistenPort=0\n"
                    if command == "broker" else conf)
    p = subprocess.run([sys.executable, "-m", "ledgermq", command, "-c", str(path), "--json"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "config error" in p.stderr and key in p.stderr, p.stderr
