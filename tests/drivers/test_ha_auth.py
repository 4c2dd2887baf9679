"""The cluster secret on the HA port, over real sockets between real stores: a slave with
the master's secret replicates; one with another secret, or none, is refused before a
single log byte leaves the master, each side saying why; a master without a secret tells
an authenticating slave so instead of misreading its handshake. The handshake itself is
checked sans-IO: proofs cannot be reflected or replayed."""
import asyncio
import logging

import pytest

from ledgermq.runtime.clock import mono_ms
from ledgermq.runtime.config import ConfigError
from ledgermq.drivers.autoswitch import AutoSwitchMasterDriver, AutoSwitchSlaveDriver, load_epochs
from ledgermq.drivers.ha import HAMasterDriver, HASlaveDriver
from ledgermq.peer_auth.stream import MAGIC
from ledgermq.peer_auth.core import (
    CLIENT, INCOMPLETE, NO_AUTH, NONCE_BYTES, PROOF_BYTES, UNEXPECTED, WRONG_SECRET,
    ClientHandshake, PeerAuth, PeerRefused, ServerHandshake, load_secret, proof,
)
from ledgermq.replication.autoswitch.sync_state import SyncConfig, SyncStateTracker
from ledgermq.replication.ha import REPORT, HAConfig

from ..wait import until
from .test_autoswitch_drivers import open_store as open_replicated_store
from .test_ha_drivers import SEG, _addr, fill, open_store

SECRET = "s3cret-of-cluster-one"
OTHER = "another-cluster-secret"
CONFIG = HAConfig(segment_size=SEG, heartbeat_ms=50)


# ---- the handshake, sans-IO -----------------------------------------------------------
def test_same_secret_both_sides_prove_it():
    c, s = ClientHandshake(SECRET), ServerHandshake(SECRET)
    nonce, server_proof = s.challenge(c.hello())
    client_proof, why = c.answer(nonce, server_proof)
    assert why is None
    s.check(client_proof)  # no exception: admitted


def test_other_secret_is_refused_on_both_sides():
    c, s = ClientHandshake(OTHER), ServerHandshake(SECRET)
    nonce, server_proof = s.challenge(c.hello())
    client_proof, why = c.answer(nonce, server_proof)
    assert "wrong cluster secret" in why
    with pytest.raises(PeerRefused, match="wrong cluster secret") as e:
        s.check(client_proof)
    assert e.value.kind == WRONG_SECRET


def test_the_servers_proof_cannot_be_reflected_nor_an_old_proof_replayed():
    c, s = ClientHandshake(SECRET), ServerHandshake(SECRET)
    nonce, server_proof = s.challenge(c.hello())
    with pytest.raises(PeerRefused):  # an attacker sending the server its own proof back
        s.check(server_proof)
    good, _ = c.answer(nonce, server_proof)
    s.check(good)
    again = ServerHandshake(SECRET)  # a new connection: a fresh server nonce
    again.challenge(c.hello())
    with pytest.raises(PeerRefused):
        again.check(good)
    assert proof(SECRET, CLIENT, c.nonce, nonce) == good


def test_secret_from_a_file_and_bad_secrets_name_the_key(tmp_path):
    f = tmp_path / "secret"
    f.write_text(SECRET + "\n")
    assert load_secret("", str(f)) == SECRET
    assert load_secret("", "") == ""
    with pytest.raises(ConfigError, match="not both"):
        load_secret(SECRET, str(f))
    with pytest.raises(ConfigError, match="clusterSecretFile=.*cannot read"):
        load_secret("", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="clusterSecret: the secret has 5 characters") as e:
        load_secret("short", "")
    assert "short" not in str(e.value)  # the secret itself is never printed


# ---- classic HA over sockets ------------------------------------------------------------
def run_pair(tmp_path, master_secret, slave_secret, check):
    """A master with 40 messages and a slave, each with its secret; `check(m, s, slave)`."""
    master, slave = open_store(tmp_path / "m"), open_store(tmp_path / "s")
    fill(master, 40)

    async def scenario():
        m = HAMasterDriver(master, CONFIG, "127.0.0.1", 0, auth=PeerAuth(master_secret))
        await m.start()
        s = HASlaveDriver(slave, CONFIG, lambda: _addr(m), auth=PeerAuth(slave_secret))
        await s.start()
        try:
            await check(m, s, slave)
        finally:
            await s.stop()
            await m.stop()
    try:
        asyncio.run(scenario())
    finally:
        master.close()
        slave.close()
    return master


def test_a_slave_with_the_secret_replicates(tmp_path):
    async def check(m, s, slave):
        await until(lambda: slave.commitlog.max_offset == m.store.commitlog.max_offset,
                    "the authenticated slave holds the master's log")
        assert m.auth.accepted >= 1
        assert not m.auth.refused and not s.auth.refused
    run_pair(tmp_path, SECRET, SECRET, check)


@pytest.mark.parametrize("slave_secret, kind, says", [
    (OTHER, WRONG_SECRET, "wrong cluster secret"),
    ("", NO_AUTH, "sent no authentication"),
])
def test_a_slave_without_the_secret_gets_no_log_bytes(tmp_path, caplog, slave_secret, kind,
                                                      says):
    caplog.set_level(logging.INFO)

    async def check(m, s, slave):
        await until(lambda: m.auth.refused[kind] >= 2, f"the master refused twice ({kind})")
        assert slave.commitlog.max_offset == 0  # not one byte of the master's log
        assert m.core.links == {} and m.writers == {}  # the core never heard of it
        if slave_secret:  # it found out the master is not of its cluster either
            assert s.auth.refused[WRONG_SECRET] >= 1
    run_pair(tmp_path, SECRET, slave_secret, check)
    assert f"failed authentication: {says}" in caplog.text
    if not slave_secret:
        assert "if it requires a cluster secret, set clusterSecret here too" in caplog.text


def test_a_master_without_a_secret_tells_an_authenticating_slave(tmp_path, caplog):
    async def check(m, s, slave):
        await until(lambda: m.auth.refused[UNEXPECTED] >= 1 and s.auth.refused[INCOMPLETE],
                    "both sides refused")
        assert slave.commitlog.max_offset == 0
        assert m.core.links == {}
    run_pair(tmp_path, "", SECRET, check)
    assert "it authenticates with a cluster secret and this broker has none" in caplog.text
    assert "closed the link during authentication (it has no cluster secret" in caplog.text


def test_a_fake_slave_with_a_wrong_proof_reads_nothing_but_the_challenge(tmp_path):
    """A hand-made client speaking the protocol: its report after a wrong proof gets no
    frame, and the link is closed."""
    async def check(m, s, slave):
        reader, writer = await asyncio.open_connection("127.0.0.1", m.port)
        writer.write(MAGIC + b"n" * NONCE_BYTES)
        challenge = await reader.readexactly(len(MAGIC) + NONCE_BYTES + PROOF_BYTES)
        assert challenge.startswith(MAGIC)
        writer.write(b"p" * PROOF_BYTES + REPORT.pack(0))  # a guessed proof, then "send all"
        rest = await asyncio.wait_for(reader.read(), 5)  # to EOF: the master closed it
        writer.close()
        assert rest == b""
        assert m.auth.refused[WRONG_SECRET] >= 1
    run_pair(tmp_path, SECRET, SECRET, check)


# ---- controller mode's HA (S1) ----------------------------------------------------------
@pytest.mark.parametrize("slave_secret", [SECRET, OTHER])
def test_controller_mode_slave_needs_the_secret(tmp_path, slave_secret):
    master, slave = open_replicated_store(tmp_path / "m"), open_replicated_store(tmp_path / "s")
    fill(master, 30)
    m_epochs, s_epochs = load_epochs(master), load_epochs(slave)
    m_epochs.append(1, 0)

    async def scenario():
        tracker = SyncStateTracker(1, (1,), 1, master.commitlog.max_offset, mono_ms(),
                                   SyncConfig(all_ack=True))
        m = AutoSwitchMasterDriver(master, CONFIG, "127.0.0.1", 0, m_epochs, tracker,
                                   lambda p: None, auth=PeerAuth(SECRET))
        await m.start()
        s = AutoSwitchSlaveDriver(slave, CONFIG, s_epochs, lambda: _addr(m), slave_id=2,
                                  auth=PeerAuth(slave_secret))
        await s.start()
        try:
            if slave_secret == SECRET:
                await until(lambda: slave.commitlog.max_offset == master.commitlog.max_offset,
                            "the slave copied the master's log")
            else:
                await until(lambda: m.auth.refused[WRONG_SECRET] >= 2, "refused twice")
                assert slave.commitlog.max_offset == 0 and s_epochs.entries == []
                assert m.core.links == {}  # its handshake never reached the core
        finally:
            await s.stop()
            await m.stop()
    asyncio.run(scenario())
    master.close()
    slave.close()
