"""A RocketMQ 5 client as the broker's processors see a connection: the gRPC endpoint turns
each call into the remoting request the broker already serves (RocketMQ's proxy in local
mode does the same), on behalf of one of these. What the broker sends a client on its own
(a transaction check-back) goes out on the client's telemetry stream."""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, cast

from ...apis import definition_pb2 as pb
from ...apis import service_pb2 as svc
from ...remoting import RemotingCommand, RemotingError, ReplyWhen, RequestCode
from ...wire.message import MessageFormatError, decode_message
from .convert import to_grpc

if TYPE_CHECKING:
    from ...remoting import Connection
    from ...remoting.transport import Reply
    from ..access.accounts import Account
    from ..broker import Broker
    from ..pop.bookkeeping import Handle

log = logging.getLogger(__name__)


class ClientChannel:
    def __init__(self, client_id: str, peer: str):
        self.client_id = client_id
        self.peer = peer
        self.attrs: dict[str, Any] = {}
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.settings: pb.Settings | None = None
        # the telemetry stream, while open (None: its end)
        self.outbox: asyncio.Queue[svc.TelemetryCommand | None] | None = None
        # who opened that stream: (peer address, access key); only they may replace it,
        # end the session, or get its check-backs
        self.owner: tuple[str, str | None] | None = None
        self.last_seen = time.monotonic()
        # deliveries this client asked to have kept invisible (renewal.py):
        # (group, topic, queue, offset) -> (its receipt handle, when it went out)
        self.renewing: dict[tuple[str, str, int, int], tuple[Handle, int]] = {}

    @property
    def is_open(self) -> bool:
        return self.outbox is not None

    def oneway(self, cmd: RemotingCommand) -> None:
        """A request from the broker: a check-back becomes RecoverOrphanedTransaction."""
        if self.outbox is None:
            raise RemotingError(f"client {self.client_id} has no telemetry stream open")
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE:
            return  # nothing else has a telemetry form (rebalance hints: POP needs none)
        try:
            msg = decode_message(cast(bytes, cmd.body), check_crc=False)  # a stored message
        except MessageFormatError as e:
            log.warning("check-back for %s not sent: %s", self.client_id, e)
            return
        try:
            self.outbox.put_nowait(svc.TelemetryCommand(
                recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(
                    message=to_grpc(msg), transaction_id=cmd.ext["commitLogOffset"])))
        except asyncio.QueueFull:  # it does not read its stream: asked again next round
            raise RemotingError(f"client {self.client_id} does not read its telemetry "
                                "stream") from None

    def close(self) -> None:
        self.outbox = None
        if not self.closed.done():
            self.closed.set_result(None)


class CallOf:
    """A client's channel as one gRPC call sees it: the channel's state (attributes, stream,
    what closes it) with the call's own account. Authorization is decided per call, from
    its own credentials, never from what another call with that client id proved."""

    def __init__(self, channel: ClientChannel, account: Account | None):
        self.channel, self.acl_account = channel, account
        self.attrs = channel.attrs  # (read by every request: not through __getattr__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.channel, name)


def call(broker: Broker, cmd: RemotingCommand,
         channel: CallOf) -> RemotingCommand | Awaitable[RemotingCommand]:
    """The broker's answer to `cmd`: itself when the handler answered at once (a send on
    a single node: no coroutine made), else an awaitable of it (later, when a replication
    future settles)."""
    # (timed as gRPC's, while metrics are on; the call stands in for a connection)
    result: Reply | Awaitable[Reply | ReplyWhen] | ReplyWhen = \
        broker.handle_grpc(cmd, cast("Connection", channel))
    if type(result) is RemotingCommand:
        return result
    return _settled(result)


async def _settled(result: Reply | Awaitable[Reply | ReplyWhen] | ReplyWhen
                   ) -> RemotingCommand:
    # (an async handler may answer with a ReplyWhen too)
    if type(result) is ReplyWhen:
        return result.respond(await result.future)
    if inspect.isawaitable(result):
        result = await result
        if type(result) is ReplyWhen:
            return result.respond(await result.future)
    return cast(RemotingCommand, result)  # requests, not one-way: always answered
