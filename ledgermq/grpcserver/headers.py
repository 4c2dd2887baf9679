"""A connection's HPACK decoder (RFC 7541): its dynamic table kept between header blocks.

The walk itself is wire/hpack_block.py (compiled, with its pure twin). The `hpack` library
decodes the same (its static table is used here, and its Huffman decoder is the pure twin
of the compiled one) but spends ~15 µs a gRPC request's block in per-field objects and log
calls. tests/grpcserver/test_headers.py holds the two to the same answers on generated
blocks."""
from __future__ import annotations

from hpack.table import HeaderTable

from ..wire.hpack_block import hpack_block
from ..wire.message import MessageFormatError

STATIC: tuple[tuple[bytes, bytes], ...] = tuple(HeaderTable.STATIC_TABLE)  # indices 1..61


class HeaderBlockError(Exception):
    """A block that does not decode: the connection's table can no longer be trusted."""


class HeaderDecoder:
    def __init__(self, max_table_size: int = 4096, max_list_size: int = 1 << 16):
        self.max_allowed = max_table_size  # what we advertised (SETTINGS_HEADER_TABLE_SIZE)
        self.max_size = max_table_size  # what the encoder chose, at most that
        self.max_list_size = max_list_size
        self.dynamic: list[tuple[bytes, bytes]] = []  # newest first
        self.size = 0

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        try:
            fields, self.dynamic, self.size, self.max_size = hpack_block(
                block, STATIC, self.dynamic, self.size, self.max_size, self.max_allowed,
                self.max_list_size)
        except MessageFormatError as e:
            raise HeaderBlockError(str(e)) from None
        return fields
