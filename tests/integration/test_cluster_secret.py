"""`cluster up` gives every server a fresh cluster secret (a file only its owner reads):
its replicas replicate with it, while a stranger on the master's HA port, with no secret
or another one, gets not one byte of the log and the master logs why."""
import asyncio
import stat
import subprocess
import sys

import pytest

from ledgermq.localcluster.cluster import down, up
from ledgermq.peer_auth.stream import connect
from ledgermq.peer_auth.core import WRONG_SECRET, PeerRefused
from ledgermq.replication.ha import REPORT

from ..wait import wait_until
from .test_classic_ha import wait_caught_up


def test_cluster_up_authenticates_the_ha_port(tmp_path):
    d = tmp_path / "c"
    state = up("sync", 2, d)
    try:
        secret_file = d / "cluster.secret"
        assert state["clusterSecretFile"] == str(secret_file)
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        assert len(secret_file.read_text().strip()) == 64
        wait_caught_up(d)  # the slave proved the secret and follows
        master = next(p for p in state["processes"] if p["name"] == "n0")
        addr = f"127.0.0.1:{master['replPort']}"

        async def strangers():
            reader, writer = await asyncio.open_connection("127.0.0.1", master["replPort"])
            writer.write(REPORT.pack(0))  # "I hold nothing: send me everything"
            got = await asyncio.wait_for(reader.read(), 10)  # until the master closes it
            writer.close()
            with pytest.raises(PeerRefused) as e:
                await connect(addr, "another-clusters-secret")
            return got, e.value
        got, refused = asyncio.run(strangers())
        assert got == b""
        assert refused.kind == WRONG_SECRET
        log = d / "n0" / "server.log"
        wait_until(lambda: "sent no authentication" in log.read_text() and
                   "failed authentication: wrong cluster secret" in log.read_text(),
                   "the master logged both refusals", timeout=10)
    finally:
        down(d)


def test_a_bad_secret_setting_stops_the_server_with_the_key_named(tmp_path):
    def run(*args):
        r = subprocess.run([sys.executable, "-m", "ledgermq", *args], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode != 0
        return r.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text(f"listenPort=0\nstorePathRootDir={tmp_path / 'b'}\nclusterSecret=hush\n")
    err = run("broker", "-c", str(conf))
    assert "clusterSecret: the secret has 4 characters, use at least 16" in err
    assert "hush" not in err  # the secret itself is never printed
    conf.write_text(f"listenPort=0\nstorePathRootDir={tmp_path / 'b'}\n"
                    f"clusterSecretFile={tmp_path / 'missing'}\n")
    assert "clusterSecretFile=" in run("broker", "-c", str(conf))
    err = run("controlnode", "--port", "0", "--dir", str(tmp_path / "cn"),
              "--cluster-secret-file", str(tmp_path / "missing"))
    assert "--cluster-secret-file=" in err and "cannot read it" in err
