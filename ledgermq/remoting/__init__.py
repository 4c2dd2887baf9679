"""RocketMQ's remoting protocol: frame codec, request/response codes, asyncio transport."""
from .codes import (
    FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, RequestCode, ResponseCode, SerializeType,
)
from .command import FrameError, FrameSplitter, RemotingCommand, decode_frame
from .transport import Connection, RemotingError, RemotingServer, RemotingTimeout, ReplyWhen
from .client import RemotingClient

__all__ = [
    "FLAG_ONEWAY", "FLAG_RESPONSE", "LanguageCode", "RequestCode", "ResponseCode",
    "SerializeType", "FrameError", "FrameSplitter", "RemotingCommand", "decode_frame",
    "Connection", "RemotingClient", "RemotingError", "RemotingServer", "RemotingTimeout",
    "ReplyWhen",
]
