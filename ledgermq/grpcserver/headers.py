"""HPACK header blocks decoded (RFC 7541), a connection's dynamic table kept.

The `hpack` library decodes the same (its static table is used here, and its Huffman
decoder is the pure twin of the compiled one in wire/huffman.py) but spends ~15 µs a gRPC
request's block in per-field objects and log calls; a client's blocks are mostly indexed
fields, which this walks in a few µs. tests/grpcserver/test_headers.py
holds the two to the same answers on generated blocks."""
from __future__ import annotations

from hpack.table import HeaderTable

from ..wire.huffman import hpack_huffman
from ..wire.message import MessageFormatError

STATIC = HeaderTable.STATIC_TABLE  # indices 1..61
ENTRY_OVERHEAD = 32  # an entry's size: name + value + 32 (§4.1)
MAX_INTEGER_BYTES = 5  # a prefix integer this server reads: under 2^35


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
        out: list[tuple[bytes, bytes]] = []
        listed = 0
        pos, n = 0, len(block)
        static, dynamic = STATIC, self.dynamic
        while pos < n:
            b = block[pos]
            if b & 0x80:  # indexed field (most of a client's block: its short form inline)
                if 0x80 < b < 0xFF and b - 0x80 <= len(static):
                    field = static[b - 0x81]
                    pos += 1
                elif 0xBE <= b < 0xFF and b - 0xBE < len(dynamic):
                    field = dynamic[b - 0xBE]
                    pos += 1
                else:
                    index, pos = self._integer(block, pos, 7)
                    field = self._field(index)
            elif b & 0x40:  # literal, added to the table
                field, pos = self._literal(block, pos, 6)
                self._add(field)
            elif b & 0x20:  # table size update: only before the first field
                if out:
                    raise HeaderBlockError("a table size update after a field")
                size, pos = self._integer(block, pos, 5)
                if size > self.max_allowed:
                    raise HeaderBlockError(f"table size {size} over {self.max_allowed}")
                self.max_size = size
                self._evict()
                continue
            else:  # literal, not added (0000) or never added (0001)
                field, pos = self._literal(block, pos, 4)
            listed += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
            if listed > self.max_list_size:
                raise HeaderBlockError(f"a header list over {self.max_list_size} B")
            out.append(field)
        return out

    def _field(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= len(STATIC):
            return STATIC[index - 1]
        d = index - len(STATIC) - 1
        if index == 0 or d >= len(self.dynamic):
            raise HeaderBlockError(f"no table entry {index}")
        return self.dynamic[d]

    def _literal(self, block: bytes, pos: int, prefix: int) -> tuple[tuple[bytes, bytes], int]:
        index, pos = self._integer(block, pos, prefix)
        if index:
            name = self._field(index)[0]
        else:
            name, pos = self._string(block, pos)
        value, pos = self._string(block, pos)
        return (name, value), pos

    def _add(self, field: tuple[bytes, bytes]) -> None:
        size = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
        if size > self.max_size:  # larger than the table: it empties it (§4.4)
            self.dynamic.clear()
            self.size = 0
            return
        self.dynamic.insert(0, field)
        self.size += size
        self._evict()

    def _evict(self) -> None:
        while self.size > self.max_size:
            name, value = self.dynamic.pop()
            self.size -= len(name) + len(value) + ENTRY_OVERHEAD

    @staticmethod
    def _integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
        mask = (1 << prefix) - 1
        value = block[pos] & mask
        pos += 1
        if value < mask:
            return value, pos
        shift = 0
        for _ in range(MAX_INTEGER_BYTES):
            if pos >= len(block):
                raise HeaderBlockError("a block ends inside an integer")
            b = block[pos]
            pos += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value, pos
        raise HeaderBlockError("an integer too large")

    @classmethod
    def _string(cls, block: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(block):
            raise HeaderBlockError("a block ends before a string")
        huffman = block[pos] & 0x80
        length, pos = cls._integer(block, pos, 7)
        end = pos + length
        if end > len(block):
            raise HeaderBlockError("a string longer than its block")
        raw = block[pos:end]
        if not huffman:
            return raw, end
        try:
            return hpack_huffman(raw), end
        except MessageFormatError as e:
            raise HeaderBlockError(str(e)) from None
