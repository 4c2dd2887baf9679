"""The HA port with TLS (tls.server.mode) between two real stores: an enforcing master
serves a TLS slave; a plaintext master closes a TLS slave at its first bytes, saying why,
instead of reading its handshake as a report (an offset past 1.5 EB)."""
import asyncio
import logging

from ledgermq.localcluster.certs import CertAuthority
from ledgermq.drivers.ha import HAMasterDriver, HASlaveDriver
from ledgermq.remoting.tls import load_tls
from ledgermq.replication.ha import HAConfig

from ..wait import until
from .test_ha_drivers import SEG, fill, open_store


def tls_pair(tmp_path):
    ca = CertAuthority.create(tmp_path / "pki")
    cert, key = ca.issue(tmp_path / "pki", "broker")
    return load_tls({"tls.server.mode": "enforcing", "tls.server.certPath": str(cert),
                     "tls.server.keyPath": str(key), "tls.enable": "true",
                     "tls.client.trustCertPath": str(ca.cert_path)})


def test_enforcing_master_serves_a_tls_slave(tmp_path):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 50)
    config = HAConfig(segment_size=SEG, heartbeat_ms=100)
    tls = tls_pair(tmp_path)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0, tls=tls)
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m), tls=tls)
        await s.start()
        try:
            await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                        "the TLS slave holds the master's log")
            assert next(iter(m.writers.values())).get_extra_info("sslcontext") is not None
        finally:
            await s.stop()
            await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()


def test_plaintext_master_closes_a_tls_slave_saying_why(tmp_path, caplog):
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 5)
    config = HAConfig(segment_size=SEG, heartbeat_ms=100)

    async def scenario():
        m = HAMasterDriver(master, config, "127.0.0.1", 0)  # tls.server.mode=disabled
        await m.start()
        s = HASlaveDriver(slave, config, lambda: _addr(m), tls=tls_pair(tmp_path))
        await s.start()
        try:
            await until(lambda: "starts a TLS handshake" in caplog.text,
                        "the master says why it closed the link")
            assert not m.core.links and slave.commitlog.max_offset == 0
        finally:
            await s.stop()
            await m.stop()
    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    master.close()
    slave.close()


async def _addr(m):
    return f"127.0.0.1:{m.port}"
