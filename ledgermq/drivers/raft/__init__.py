"""Raft over real sockets and files: the peer codec, the asyncio driver of a RaftNode,
and a file-backed log (the controller's). DLedger brokers keep their log in the commit
log instead (drivers/dledger_log.py) and share the codec and driver."""
from .codec import RAFT_MESSAGE, decode_message, encode_message, parse_peers
from .driver import RaftDriver, RaftMeta
from .file_log import FileRaftLog

__all__ = ["RAFT_MESSAGE", "FileRaftLog", "RaftDriver", "RaftMeta", "decode_message",
           "encode_message", "parse_peers"]
