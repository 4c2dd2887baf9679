"""ledgermq's HPACK decoding (grpcserver/headers.py) against the `hpack` library's: the same
headers from the same blocks, block after block on one connection's table, for blocks the
library's encoder makes (Huffman or not, indexed or not, table sizes changed) and for
arbitrary bytes (then both refuse, or both agree)."""
import os

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermq.grpcserver.headers import HeaderBlockError, HeaderDecoder

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))

NAMES = st.sampled_from([b":path", b":method", b"content-type", b"x-mq-client-id",
                         b"grpc-timeout", b"authorization", b"user-agent", b"te"]) | \
    st.binary(min_size=1, max_size=12).map(lambda b: b.lower())
VALUES = st.binary(max_size=60)
FIELD = st.tuples(NAMES, VALUES, st.booleans())  # (name, value, never indexed)
BLOCK = st.tuples(st.lists(FIELD, max_size=12), st.booleans(),
                  st.none() | st.integers(0, 4096))  # (fields, huffman, new table size)


def both_decode(blocks):
    ours, theirs = HeaderDecoder(), hpack.Decoder(max_header_list_size=1 << 30)
    ours.max_list_size = 1 << 30
    for block in blocks:
        try:
            expected = [(bytes(k), bytes(v)) for k, v in theirs.decode(block, raw=True)]
        except hpack.HPACKError:
            with pytest.raises(HeaderBlockError):
                ours.decode(block)
            return
        assert ours.decode(block) == expected
        assert ours.dynamic == list(theirs.header_table.dynamic_entries)


@settings(max_examples=EXAMPLES, deadline=None)
@given(blocks=st.lists(BLOCK, min_size=1, max_size=6))
def test_blocks_the_library_encodes_decode_the_same(blocks):
    encoder, encoded = hpack.Encoder(), []
    for fields, huffman, size in blocks:
        if size is not None:
            encoder.header_table_size = size
        encoded.append(encoder.encode(
            [hpack.NeverIndexedHeaderTuple(k, v) if never else (k, v)
             for k, v, never in fields], huffman=huffman))
    both_decode(encoded)


@settings(max_examples=EXAMPLES, deadline=None)
@given(blocks=st.lists(st.binary(max_size=40), min_size=1, max_size=4))
def test_arbitrary_bytes_are_refused_or_decoded_the_same(blocks):
    both_decode(blocks)


def test_a_header_list_over_the_limit_is_refused():
    block = hpack.Encoder().encode([(b"x-big", b"v" * 200)] * 10)
    with pytest.raises(HeaderBlockError, match="header list over"):
        HeaderDecoder(max_list_size=1000).decode(block)


def test_a_table_larger_than_advertised_is_refused():
    encoder = hpack.Encoder()
    encoder.header_table_size = 8192
    with pytest.raises(HeaderBlockError, match="table size 8192"):
        HeaderDecoder().decode(encoder.encode([(b"a", b"b")]))
