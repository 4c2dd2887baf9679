"""Peer authentication with the cluster secret (clusterSecret / clusterSecretFile).

The servers of one cluster (brokers, controllers, the control node) prove to each other
that they know a shared secret before anything crosses their internal links: the HA port,
the DLedger peer port, the controller and control-node protocols. A mutual
challenge-response, once per connection: each side sends a fresh random nonce, and each
proves it knows the secret with HMAC-SHA256(secret, role | client nonce | server nonce).
A proof is good for one connection only (both nonces are fresh) and cannot be sent back
as the other side's (the role is in it). The secret itself never crosses the wire.

Sans-IO here: the proofs, the two sides' steps, and what a refusal says. Raw streams
carry them in peer_auth/stream.py, remoting connections in peer_auth/remoting.py. Without
TLS the traffic after the handshake is neither encrypted nor protected from someone on
the path: this keeps out whoever can merely reach a port.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections import Counter
from pathlib import Path

from ..runtime.config import ConfigError
from ..runtime.files import write_private

log = logging.getLogger(__name__)

NONCE_BYTES = 16
PROOF_BYTES = 32
MIN_SECRET_CHARS = 16
CLIENT, SERVER = "client", "server"
HANDSHAKE_TIMEOUT_S = 5.0
LOG_EVERY_S = 10.0  # one line per peer host, link and kind of refusal this often

# kinds of refusal (the counters' keys)
NO_AUTH = "no_auth"  # the peer sent no authentication: it has no secret configured
WRONG_SECRET = "wrong_secret"  # its proof does not match: another secret
INCOMPLETE = "incomplete"  # it went away or stalled mid-handshake
UNEXPECTED = "unexpected_auth"  # it wants to authenticate, we have no secret


def load_secret(secret: str, secret_file: str, what: str = "clusterSecret",
                file_key: str = "clusterSecretFile") -> str:
    """The cluster secret from `what` (inline) or `file_key` (a file holding it); "" when
    neither is set (peer authentication off). ConfigError naming the key otherwise."""
    if secret and secret_file:
        raise ConfigError(f"set {what} or {file_key}, not both")
    if secret_file:
        try:
            secret = Path(secret_file).read_text().strip()
        except OSError as e:
            raise ConfigError(f"{file_key}={secret_file!r}: cannot read it: "
                              f"{e.strerror or e}") from None
        if not secret:
            raise ConfigError(f"{file_key}={secret_file!r} is empty: put the cluster "
                              "secret in it (e.g. `openssl rand -hex 32 > FILE`)")
        what = file_key
    if secret and len(secret) < MIN_SECRET_CHARS:  # never print the secret itself
        raise ConfigError(f"{what}: the secret has {len(secret)} characters, use at least "
                          f"{MIN_SECRET_CHARS} (e.g. `openssl rand -hex 32`)")
    return secret


def write_secret(path: Path) -> Path:
    """A new random secret in `path` (replacing any), readable by its owner only."""
    return write_private(path, (secrets.token_hex(32) + "\n").encode())


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(secret: str, role: str, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret.encode(), role.encode() + b"|" + client_nonce + server_nonce,
                    hashlib.sha256).digest()


class PeerRefused(ConnectionError):
    """A peer (or we, to a peer) failed authentication; `kind` says how, str() why."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


class ClientHandshake:
    """The connecting side: hello() opens, answer() checks the server and proves us."""

    def __init__(self, secret: str):
        self.secret = secret
        self.nonce = new_nonce()

    def hello(self) -> bytes:
        return self.nonce

    def answer(self, server_nonce: bytes, server_proof: bytes) -> tuple[bytes, str | None]:
        """Our proof, and why the server is not to be trusted (None: it knows the secret).
        The proof goes out even then, so the server can say "wrong cluster secret" too."""
        ours = proof(self.secret, CLIENT, self.nonce, server_nonce)
        good = len(server_nonce) == NONCE_BYTES and hmac.compare_digest(
            server_proof, proof(self.secret, SERVER, self.nonce, server_nonce))
        return ours, None if good else "wrong cluster secret (its proof does not match ours)"


class ServerHandshake:
    """The accepting side: challenge() answers the hello, check() the client's proof."""

    def __init__(self, secret: str):
        self.secret = secret
        self.nonce = new_nonce()
        self.client_nonce: bytes | None = None

    def challenge(self, client_nonce: bytes) -> tuple[bytes, bytes]:
        """(our nonce, our proof) for the client's hello."""
        if len(client_nonce) != NONCE_BYTES:
            raise PeerRefused(INCOMPLETE, f"a hello of {len(client_nonce)} bytes, not "
                                          f"{NONCE_BYTES}")
        self.client_nonce = client_nonce
        return self.nonce, proof(self.secret, SERVER, client_nonce, self.nonce)

    def check(self, client_proof: bytes) -> None:
        """Raises PeerRefused unless the client proved it knows the secret."""
        if self.client_nonce is None:
            raise PeerRefused(NO_AUTH, "sent a proof without a hello")
        if not hmac.compare_digest(client_proof,
                                   proof(self.secret, CLIENT, self.client_nonce, self.nonce)):
            raise PeerRefused(WRONG_SECRET, "wrong cluster secret")


class PeerAuth:
    """A server's cluster secret ("" : peer authentication off) and what became of the
    peers that tried: `refused[kind]` and `accepted` (for metrics). Refusals are logged at
    most one line per link, peer host and kind every LOG_EVERY_S: a misconfigured peer
    retries often."""

    def __init__(self, secret: str = ""):
        self.secret = secret
        self.refused: Counter[str] = Counter()
        self.accepted = 0
        self._logged: dict[tuple, float] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.secret)

    def refuse(self, link: str, peer, e: PeerRefused) -> None:
        self.refused[e.kind] += 1
        key = (link, str(peer).rsplit(":", 1)[0], e.kind)
        now = time.monotonic()
        if now - self._logged.get(key, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[key] = now
            log.warning("%s: peer %s failed authentication: %s", link, peer, e)
