"""TLS on a remoting port (tls.server.mode), with a CA the test makes: enforcing serves
TLS and closes plaintext saying why, permissive serves both on one port, a client that
trusts another CA fails at once with a clear error, bad settings fail at load naming the
key. Each runs on asyncio's loop and on uvloop (the servers' loop)."""
import asyncio
import logging
import time

import pytest

from ledgermq.localcluster.certs import CertAuthority
from ledgermq.runtime.config import ConfigError
from ledgermq.remoting import RemotingClient, RemotingCommand, RemotingError, RemotingServer
from ledgermq.remoting.tls import TlsMode, client_context, load_tls

uvloop = pytest.importorskip("uvloop")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertAuthority.create(d / "ca")
    cert, key = ca.issue(d, "server")
    other = CertAuthority.create(d / "other-ca", "another CA")
    client_cert, client_key = ca.issue(d, "client")
    return {"ca": ca, "cert": cert, "key": key, "other": other,
            "client_cert": client_cert, "client_key": client_key, "dir": d}


def server_keys(pki, mode, **more):
    return {"tls.server.mode": mode, "tls.server.certPath": str(pki["cert"]),
            "tls.server.keyPath": str(pki["key"]), **more}


def echo(cmd, conn):
    return cmd.response(0, f"hello {cmd.code}" + (" over TLS" if
                                                  conn.transport.get_extra_info("sslcontext")
                                                  else ""))


def run(loop_kind, coro_fn):
    if loop_kind == "uvloop":
        return uvloop.run(coro_fn())
    return asyncio.run(coro_fn())


async def ask(server, ssl_context=None, timeout=3.0):
    client = RemotingClient(ssl_context=ssl_context, connect_timeout=timeout)
    try:
        return (await client.invoke(server.address, RemotingCommand(code=42), timeout)).remark
    finally:
        await client.close()


LOOPS = ["asyncio", "uvloop"]


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_enforcing_serves_tls_and_closes_plaintext_saying_why(pki, loop_kind, caplog):
    tls = load_tls(server_keys(pki, "enforcing"))

    async def main():
        server = RemotingServer(echo, tls=tls, what="test port")
        await server.start()
        try:
            assert await ask(server, client_context(pki["ca"].cert_path)) == \
                "hello 42 over TLS"
            t0 = time.monotonic()
            with pytest.raises(RemotingError, match="closed"):
                await ask(server)  # plaintext
            assert time.monotonic() - t0 < 2  # refused, not left to time out
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        run(loop_kind, main)
    assert any("closing plaintext connection" in r.getMessage() and
               "tls.server.mode=enforcing" in r.getMessage() for r in caplog.records), \
        caplog.text


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_permissive_serves_plaintext_and_tls_on_one_port(pki, loop_kind):
    tls = load_tls(server_keys(pki, "permissive"))

    async def main():
        server = RemotingServer(echo, tls=tls)
        await server.start()
        try:
            ctx = client_context(pki["ca"].cert_path)
            got = await asyncio.gather(ask(server), ask(server, ctx), ask(server),
                                       ask(server, ctx))
            assert got == ["hello 42", "hello 42 over TLS"] * 2
        finally:
            await server.stop()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_client_trusting_another_ca_fails_at_once_saying_so(pki, loop_kind):
    tls = load_tls(server_keys(pki, "enforcing"))

    async def main():
        server = RemotingServer(echo, tls=tls)
        await server.start()
        try:
            t0 = time.monotonic()
            with pytest.raises(RemotingError, match="certificate verify failed|unable to get"):
                await ask(server, client_context(pki["other"].cert_path))
            assert time.monotonic() - t0 < 2
            # the server still serves the clients that trust it
            assert await ask(server, client_context(pki["ca"].cert_path)) == \
                "hello 42 over TLS"
        finally:
            await server.stop()

    run(loop_kind, main)


def test_tls_client_at_a_plaintext_port_fails_at_once(pki, caplog):
    async def main():
        server = RemotingServer(echo)  # tls.server.mode=disabled: create_server as ever
        await server.start()
        try:
            t0 = time.monotonic()
            with pytest.raises(RemotingError, match="cannot connect"):
                await ask(server, client_context(pki["ca"].cert_path))
            assert time.monotonic() - t0 < 2
            assert await ask(server) == "hello 42"
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert "a TLS handshake: this port does not serve TLS" in caplog.text, caplog.text


def test_required_client_certificate(pki):
    tls = load_tls(server_keys(pki, "enforcing", **{
        "tls.server.need.client.auth": "require",
        "tls.server.trustCertPath": str(pki["ca"].cert_path)}))

    async def main():
        server = RemotingServer(echo, tls=tls)
        await server.start()
        try:
            with pytest.raises(RemotingError):
                await ask(server, client_context(pki["ca"].cert_path))  # no certificate
            with_cert = client_context(pki["ca"].cert_path, cert=pki["client_cert"],
                                       key=pki["client_key"])
            assert await ask(server, with_cert) == "hello 42 over TLS"
        finally:
            await server.stop()

    uvloop.run(main())


def test_client_side_keys_and_config_file(pki, tmp_path):
    # tls.config.file holds the keys (paths relative to it); the server's own keys win
    (tmp_path / "tls.properties").write_text(
        f"tls.server.mode=permissive\ntls.server.certPath={pki['cert']}\n"
        f"tls.server.keyPath={pki['key']}\ntls.enable=true\n"
        f"tls.client.trustCertPath={pki['ca'].cert_path}\n")
    tls = load_tls({"tls.config.file": str(tmp_path / "tls.properties"),
                    "tls.server.mode": "enforcing"})
    assert tls.mode is TlsMode.ENFORCING and tls.server is not None
    assert tls.client is not None and tls.client.check_hostname
    assert load_tls({}).server is None and load_tls({}).client is None


def test_encrypted_key_with_its_password(pki, tmp_path):
    cert, key = pki["ca"].issue(tmp_path, "locked", password="s3cret")
    assert load_tls({"tls.server.mode": "enforcing", "tls.server.certPath": str(cert),
                     "tls.server.keyPath": str(key),
                     "tls.server.keyPassword": "s3cret"}).server is not None
    with pytest.raises(ConfigError, match="tls.server.keyPassword"):
        load_tls({"tls.server.mode": "enforcing", "tls.server.certPath": str(cert),
                  "tls.server.keyPath": str(key), "tls.server.keyPassword": "wrong"})


@pytest.mark.parametrize("change, key", [
    ({"tls.server.mode": "strict"}, "tls.server.mode"),
    ({"tls.server.certPath": "/nonexistent/server.pem"}, "tls.server.certPath"),
    ({"tls.server.keyPath": "/nonexistent/server-key.pem"}, "tls.server.keyPath"),
    ({"tls.server.keyPath": "client_key"}, "tls.server.keyPath"),  # another cert's key
    ({"tls.server.need.client.auth": "always"}, "tls.server.need.client.auth"),
    ({"tls.server.need.client.auth": "require"}, "tls.server.trustCertPath"),
    ({"tls.enable": "yes"}, "tls.enable"),
    ({"tls.enable": "true", "tls.client.trustCertPath": "/nonexistent/ca.pem"},
     "tls.client.trustCertPath"),
    ({"tls.sever.mode": "enforcing"}, "tls.sever.mode"),
    ({"tls.config.file": "/nonexistent/tls.properties"}, "tls.config.file"),
])
def test_bad_settings_fail_at_load_naming_the_key(pki, change, key):
    values = server_keys(pki, "enforcing")
    values.update({k: str(pki[v]) if v in pki else v for k, v in change.items()})
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_tls(values)


def test_enforcing_without_a_certificate_names_the_keys():
    with pytest.raises(ConfigError, match=r"tls\.server\.certPath"):
        load_tls({"tls.server.mode": "enforcing"})


def test_a_reply_is_one_tls_record(pki):
    """SSL transports make a TLS record of each buffer they are given, and a reply is
    several (prefix, header, body): the connection joins them, or every reply costs
    three records' encryption and framing (pipelined sends ran at a quarter)."""
    tls = load_tls(server_keys(pki, "enforcing"))
    records = []

    async def main():
        server = RemotingServer(lambda cmd, conn: cmd.response(0, "ok", body=b"x" * 10),
                                tls=tls)
        await server.start()

        async def relay(reader, writer):
            up_r, up_w = await asyncio.open_connection("127.0.0.1", server.port)

            async def pump(src, dst, count):
                buf = b""
                while data := await src.read(65536):
                    dst.write(data)
                    if count:  # TLS records from the server: 5-byte header, then length
                        buf += data
                        while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[3:5]):
                            records.append(buf[0])
                            buf = buf[5 + int.from_bytes(buf[3:5]):]
                dst.close()
            await asyncio.gather(pump(reader, up_w, False), pump(up_r, writer, True))

        proxy = await asyncio.start_server(relay, "127.0.0.1", 0)
        client = RemotingClient(ssl_context=client_context(pki["ca"].cert_path))
        addr = f"127.0.0.1:{proxy.sockets[0].getsockname()[1]}"
        try:
            for _ in range(100):
                assert (await client.invoke(addr, RemotingCommand(code=42))).body == b"x" * 10
        finally:
            await client.close()
            proxy.close()
            await server.stop()

    uvloop.run(main())
    app_data = records.count(0x17)  # TLS 1.3: also the encrypted handshake and tickets
    assert 100 <= app_data < 120, app_data
