"""The cluster-secret handshake (ledgermq/peer_auth/core.py) on remoting connections: request
code PEER_AUTH, twice, on a new connection before any other request:

  step=hello  nonce=HEX  ->  SUCCESS nonce=HEX proof=HEX  (the server's)
  step=proof  proof=HEX  ->  SUCCESS (the connection is authenticated), or NO_PERMISSION

A server keeps what it learned in the connection; `refusal` turns away the request codes
that need an authenticated peer on any other connection (NO_PERMISSION and the reason; a
oneway request is dropped). A client's `authenticate` runs on each new connection
(RemotingClient's hook). Every server answers PEER_AUTH, a server without a secret with
NO_PERMISSION saying so, so a peer with a secret and one without both log what is wrong.
"""
from __future__ import annotations

from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.transport import Connection, RemotingError
from .core import (
    HANDSHAKE_TIMEOUT_S, INCOMPLETE, NO_AUTH, UNEXPECTED, WRONG_SECRET, ClientHandshake, PeerAuth,
    PeerRefused, ServerHandshake,
)

PEER_AUTH = RequestCode.PEER_AUTH
_AUTHED, _HANDSHAKE = "peer_authenticated", "peer_handshake"
SECRET_HINT = "set clusterSecret (or clusterSecretFile) the same on every server"


class PeerAuthError(RemotingError):
    """This connection's peer did not authenticate, or refused us."""


class PeerGate:
    """Peer authentication for one server's remoting port (`link` names it in the log)."""

    def __init__(self, auth: PeerAuth, link: str):
        self.auth, self.link = auth, link

    # ---- the server's side ----------------------------------------------------------
    def serve(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Answer a PEER_AUTH request."""
        try:
            return self._step(cmd, conn)
        except PeerRefused as e:
            self.auth.refuse(self.link, conn.peer, e)
            return cmd.response(ResponseCode.NO_PERMISSION, f"{self.link}: {e}")
        except ValueError as e:  # not hex
            return cmd.response(ResponseCode.NO_PERMISSION, f"bad PEER_AUTH request: {e}")

    def _step(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        if not self.auth.enabled:
            raise PeerRefused(UNEXPECTED, "it authenticates with a cluster secret and this "
                                          f"server has none: {SECRET_HINT}")
        step = cmd.ext.get("step")
        if step == "hello":
            hs = conn.attrs[_HANDSHAKE] = ServerHandshake(self.auth.secret)
            conn.attrs[_AUTHED] = False
            nonce, ours = hs.challenge(bytes.fromhex(cmd.ext.get("nonce", "")))
            return cmd.response(ResponseCode.SUCCESS, ext={"nonce": nonce.hex(),
                                                           "proof": ours.hex()})
        hs = conn.attrs.pop(_HANDSHAKE, None)
        if step != "proof" or hs is None:
            raise PeerRefused(NO_AUTH, f"PEER_AUTH step {step!r} out of order")
        hs.check(bytes.fromhex(cmd.ext.get("proof", "")))
        conn.attrs[_AUTHED] = True
        self.auth.accepted += 1
        return cmd.response(ResponseCode.SUCCESS)

    def screen(self, cmd: RemotingCommand, conn: Connection,
               guarded) -> RemotingCommand | None:
        """The answer to a PEER_AUTH, or the refusal of a `guarded` code from an
        unauthenticated connection; None: the server handles `cmd` itself."""
        if cmd.code == PEER_AUTH:
            return self.serve(cmd, conn)
        return self.refusal(cmd, conn) if cmd.code in guarded else None

    def is_peer(self, conn: Connection) -> bool:
        """`conn` proved the cluster secret, or none is set (nothing to prove)."""
        return not self.auth.enabled or bool(conn.attrs.get(_AUTHED))

    def refusal(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        """Why `cmd` may not be served on `conn` (None: it may)."""
        if self.is_peer(conn):
            return None
        e = PeerRefused(NO_AUTH, f"sent request code {cmd.code} without authenticating "
                                 f"(this {self.link} requires the cluster secret): "
                                 f"{SECRET_HINT}")
        self.auth.refuse(self.link, conn.peer, e)
        return cmd.response(ResponseCode.NO_PERMISSION, f"{self.link}: {e}")

    # ---- the client's side ----------------------------------------------------------
    @property
    def authenticate(self):
        """RemotingClient's hook: None without a secret (nothing to prove)."""
        return self._authenticate if self.auth.enabled else None

    async def _authenticate(self, conn: Connection) -> None:
        try:
            await self._prove(conn)
        except PeerRefused as e:
            self.auth.refuse(self.link, conn.peer, e)
            raise PeerAuthError(f"{conn.peer} failed authentication: {e}") from None
        except RemotingError as e:
            e = PeerRefused(INCOMPLETE, f"no answer to our authentication ({e}): is it a "
                                        "ledgermq server of this cluster?")
            self.auth.refuse(self.link, conn.peer, e)
            raise PeerAuthError(f"{conn.peer} failed authentication: {e}") from None

    async def _prove(self, conn: Connection) -> None:
        hs = ClientHandshake(self.auth.secret)
        r = await conn.request(RemotingCommand(PEER_AUTH, ext={
            "step": "hello", "nonce": hs.hello().hex()}), HANDSHAKE_TIMEOUT_S)
        if r.code != ResponseCode.SUCCESS:
            raise PeerRefused(NO_AUTH, f"refused our authentication: {r.remark}")
        try:
            ours, why = hs.answer(bytes.fromhex(r.ext["nonce"]), bytes.fromhex(r.ext["proof"]))
        except (KeyError, ValueError):
            raise PeerRefused(NO_AUTH, "answered PEER_AUTH without a proof") from None
        r = await conn.request(RemotingCommand(PEER_AUTH, ext={
            "step": "proof", "proof": ours.hex()}), HANDSHAKE_TIMEOUT_S)
        if why is not None:  # our proof went out even so: the server logs it too
            raise PeerRefused(WRONG_SECRET, why)
        if r.code != ResponseCode.SUCCESS:
            raise PeerRefused(WRONG_SECRET, f"refused our proof: {r.remark}")
