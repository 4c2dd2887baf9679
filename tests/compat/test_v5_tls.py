"""RocketMQ 5's official Python client over TLS: a broker with tls.server.mode=enforcing
serves its gRPC endpoint with TLS only, permissive takes TLS and plaintext on its one port;
the client (tls_enable=True, trusting the test's CA through gRPC's
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) sends and receives, and a remoting client with the same CA
reads what it sent."""
import asyncio

import pytest

from ledgermq.localcluster.certs import CertAuthority
from ledgermq.client.admin import Admin
from ledgermq.remoting.tls import client_context

from ..dev_process import DevProcess
from ..integration.load import read_all


@pytest.fixture(params=["enforcing", "permissive"])
def tls_broker(tmp_path, request):
    ca = CertAuthority.create(tmp_path / "pki")
    cert, key = ca.issue(tmp_path / "pki", "broker")
    d = DevProcess(tmp_path / "dev", {
        "grpcServerPort": "0", "tls.server.mode": request.param,
        "tls.server.certPath": str(cert), "tls.server.keyPath": str(key),
        "tls.enable": "true", "tls.client.trustCertPath": str(ca.cert_path)}).start()
    yield d, ca
    d.stop()


def test_v5_client_sends_and_receives_over_tls(tls_broker, v5, monkeypatch):
    d, ca = tls_broker
    ctx = client_context(ca.cert_path)

    async def create():
        async with Admin(d.namesrv, tls=ctx) as a:
            await a.update_topic("V5Tls", read_queues=2, write_queues=2)
    asyncio.run(create())
    monkeypatch.setenv("V5_TLS", "1")
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(ca.cert_path))
    sent = v5(d.ready["grpc"], "produce", "V5Tls", 5, "normal")["receipts"]
    assert len(sent) == 5
    got = v5(d.ready["grpc"], "consume", "V5TlsGroup", "V5Tls", 5, 30)["messages"]
    assert sorted(m["body"] for m in got) == [f"normal-{i}" for i in range(5)]
    if d.conf["tls.server.mode"] == "permissive":  # plaintext on the same port too
        monkeypatch.delenv("V5_TLS")
        assert len(v5(d.ready["grpc"], "produce", "V5Tls", 1, "normal")["receipts"]) == 1
        got = v5(d.ready["grpc"], "consume", "V5TlsGroup", "V5Tls", 1, 30)["messages"]
        assert [m["body"] for m in got] == ["normal-0"]

    monkeypatch.setenv("LEDGERMQ_TLS", "true")
    monkeypatch.setenv("LEDGERMQ_TLS_CA", str(ca.cert_path))
    stored = asyncio.run(read_all(d.namesrv, topic="V5Tls"))  # tls from the environment
    assert sorted(b for q in stored.values() for b in q) == sorted(
        [f"normal-{i}".encode() for i in range(5)] +
        ([b"normal-0"] if d.conf["tls.server.mode"] == "permissive" else []))
