"""An HPACK header block decoded (RFC 7541) against a connection's dynamic table.

A pure function of the block and the table as it stood: it returns the fields and the table
after the block, so a block that does not decode leaves the caller's table as it was. The
compiled twin (_native_hpack.c) walks the blocks that decode; where it returns None, this
one answers, with its error. grpcserver/headers.py keeps the table between blocks.
"""
from __future__ import annotations

from .huffman import hpack_huffman
from .message import MessageFormatError
from .native import twin_or_fallback

Field = tuple[bytes, bytes]
ENTRY_OVERHEAD = 32  # an entry's size: name + value + 32 (§4.1)
MAX_INTEGER_BYTES = 5  # a prefix integer's continuation bytes read: values under 2^35


@twin_or_fallback("hpack_block")
def hpack_block(block: bytes, static: tuple[Field, ...], table: list[Field], size: int,
                 max_size: int, max_allowed: int, max_list: int
                 ) -> tuple[list[Field], list[Field], int, int]:
    """(fields, table after the block (newest first), its size, its maximum size) for a
    block decoded on `table` (not changed); MessageFormatError for a block that does not
    decode, a table size over `max_allowed`, or fields over `max_list` bytes as §4.1
    counts them."""
    walk = _Walk(block, static, list(table), size, max_size)
    out: list[Field] = []
    listed = 0
    while walk.pos < len(block):
        b = block[walk.pos]
        if b & 0x80:  # indexed field
            field = walk.field(walk.integer(7))
        elif b & 0x40:  # literal, added to the table
            field = walk.literal(6)
            walk.add(field)
        elif b & 0x20:  # table size update: only before the first field
            if out:
                raise MessageFormatError("a table size update after a field")
            new_size = walk.integer(5)
            if new_size > max_allowed:
                raise MessageFormatError(f"table size {new_size} over {max_allowed}")
            walk.max_size = new_size
            walk.evict()
            continue
        else:  # literal, not added (0000) or never added (0001)
            field = walk.literal(4)
        listed += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
        if listed > max_list:
            raise MessageFormatError(f"a header list over {max_list} B")
        out.append(field)
    return out, walk.table, walk.size, walk.max_size


class _Walk:
    """One block's position and the table as the block changes it."""

    def __init__(self, block: bytes, static: tuple[Field, ...], table: list[Field],
                 size: int, max_size: int):
        self.block, self.pos = block, 0
        self.static, self.table, self.size, self.max_size = static, table, size, max_size

    def field(self, index: int) -> Field:
        if 0 < index <= len(self.static):
            return self.static[index - 1]
        d = index - len(self.static) - 1
        if index == 0 or d >= len(self.table):
            raise MessageFormatError(f"no table entry {index}")
        return self.table[d]

    def literal(self, prefix: int) -> Field:
        index = self.integer(prefix)
        name = self.field(index)[0] if index else self.string()
        return name, self.string()

    def add(self, field: Field) -> None:
        entry = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
        if entry > self.max_size:  # larger than the table: it empties it (§4.4)
            self.table.clear()
            self.size = 0
            return
        self.table.insert(0, field)
        self.size += entry
        self.evict()

    def evict(self) -> None:
        while self.size > self.max_size:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + ENTRY_OVERHEAD

    def integer(self, prefix: int) -> int:
        block = self.block
        mask = (1 << prefix) - 1
        value = block[self.pos] & mask
        self.pos += 1
        if value < mask:
            return value
        shift = 0
        for _ in range(MAX_INTEGER_BYTES):
            if self.pos >= len(block):
                raise MessageFormatError("a block ends inside an integer")
            b = block[self.pos]
            self.pos += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value
        raise MessageFormatError("an integer too large")

    def string(self) -> bytes:
        block = self.block
        if self.pos >= len(block):
            raise MessageFormatError("a block ends before a string")
        huffman = block[self.pos] & 0x80
        length = self.integer(7)
        end = self.pos + length
        if end > len(block):
            raise MessageFormatError("a string longer than its block")
        raw = block[self.pos:end]
        self.pos = end
        return hpack_huffman(raw) if huffman else raw
