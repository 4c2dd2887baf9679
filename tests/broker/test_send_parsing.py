"""Send-request parsing: V1/V2 headers and batch bodies as RocketMQ clients encode them."""
import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.broker.refusals import Kind, Refused
from ledgermq.broker.send_parsing import parse_send_header, split_batch_body
from ledgermq.client.producer import encode_for_batch
from ledgermq.wire.message import MessageFormatError, encode_properties

pytestmark = pytest.mark.usefixtures("wire_impl")  # compiled and pure twins

prop_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02",
                                           blacklist_categories=("Cs",)), max_size=12)


def test_v1_and_v2_headers_mean_the_same():
    v1 = parse_send_header({"producerGroup": "g", "topic": "T", "queueId": "3",
                            "bornTimestamp": "5", "properties": "TAGS\x01a\x02", "batch": "1"})
    v2 = parse_send_header({"a": "g", "b": "T", "e": "3", "g": "5", "i": "TAGS\x01a\x02",
                            "m": "true"})
    assert v1 == v2 and v1.batch and v1.queue_id == 3
    with pytest.raises(Refused, match="topic") as e:
        parse_send_header({"a": "g"})
    assert e.value.kind is Kind.BAD_REQUEST
    with pytest.raises(Refused, match="queueId"):
        parse_send_header({"b": "T", "e": "x"})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.none() | prop_text,
                          st.lists(prop_text.filter(lambda k: k and " " not in k), max_size=3),
                          st.none() | prop_text.filter(bool), st.integers(0, 2**31 - 1)),
                min_size=1, max_size=12))
def test_batch_body_round_trip(items):
    raw = b""
    for body, tag, keys, uniq, flag in items:
        props = {}
        if tag is not None:
            props["TAGS"] = tag
        if keys:
            props["KEYS"] = " ".join(keys)
        if uniq:
            props["UNIQ_KEY"] = uniq
        props["XTAGS"] = "decoy"  # must not be taken for TAGS
        raw += encode_for_batch(body, encode_properties(props).decode(), flag)
    got = split_batch_body(raw)
    assert [bytes(b) for b in got.bodies] == [i[0] for i in items]
    assert got.flags == [i[4] for i in items]
    assert got.tags == [i[1] for i in items]
    assert got.index_keys == [list(i[2]) + ([i[3]] if i[3] else []) for i in items]


def test_property_lookalikes_inside_bodies_are_ignored():
    raw = encode_for_batch(b"\x02TAGS\x01fake\x02", "", 0) + \
        encode_for_batch(b"x", "TAGS\x01real\x02", 0)
    assert split_batch_body(raw).tags == [None, "real"]


@pytest.mark.parametrize("raw", [b"\x00\x00", b"\x00\x00\x00\x30" + b"\x00" * 10,
                                 encode_for_batch(b"abc", "", 0)[:-1], b""])
def test_bad_batches(raw):
    with pytest.raises(MessageFormatError):
        split_batch_body(raw)


def test_a_batch_message_without_a_trailing_separator_keeps_its_last_property():
    """RocketMQ's 4.9 Java client encodes a batch's inner properties without a trailing
    separator; the request's own properties (WAIT=true) appended to them must not run
    into the last value (a batch's tags were stored as "tagA" + "WAIT\\x01true" and every
    consumer filtering by tag dropped the messages)."""
    from ledgermq.wire.message import decode_properties
    raw = encode_for_batch(b"m", "TAGS\x01tagA", 0) + encode_for_batch(b"n", "", 0)
    got = split_batch_body(raw, b"WAIT\x01true\x02")
    assert [decode_properties(bytes(p)) for p in got.props] == [
        {"TAGS": "tagA", "WAIT": "true"}, {"WAIT": "true"}]
    assert got.tags == ["tagA", None]
