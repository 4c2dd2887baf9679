"""HPACK's Huffman-coded strings (RFC 7541 §5.2) decoded: a gRPC client codes most header
values it sends for the first time this way. The pure twin is the `hpack` library's
decoder; the compiled one (_native_hpack.c) takes the strings that decode."""
from __future__ import annotations

from hpack import HPACKDecodingError
from hpack.huffman_table import decode_huffman

from .message import MessageFormatError
from .native import twin_or_fallback


@twin_or_fallback("hpack_huffman")
def hpack_huffman(data: bytes) -> bytes:
    """The string's bytes; MessageFormatError for one that does not decode (a code that
    is EOS, padding longer than 7 bits or not all ones)."""
    try:
        return decode_huffman(data)
    except HPACKDecodingError as e:
        raise MessageFormatError(f"a Huffman string that does not decode: {e}") from None
