"""Send-request parsing: V1/V2 headers and batch bodies as RocketMQ clients encode them."""
import pytest
from hypothesis import example, given, settings, strategies as st

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


# header values as clients send them, and as a hostile one might: signs, spaces, underscores,
# non-ASCII digits, widths past 32 and 64 bits, odd cases of "true"
header_ints = st.sampled_from(["", "0", "7", "-1", "+5", " 5", "5 ", "1_000", "٣", "007",
                               "-", "2147483647", "2147483648", "-2147483649",
                               "9223372036854775807", "99999999999999999999", "x", "1e3"]) \
    | st.integers(-2**63, 2**63).map(str)
header_flags = st.sampled_from(["true", "TRUE", "tRuE", "1", "0", "false", "", "truex",
                                "İ", "true\x00"])
prop_pairs = st.lists(st.tuples(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "LMQ_DEDUP", "TIMER_DELAY_SEC",
                     "REAL_TOPIC", "TRANSACTION_CHECK_TIMES", "WAIT", "XTAGS", ""]),
    st.sampled_from(["", "1", "3", "-2", "a b", " k  j ", "١", "+4", "caf\u00e9", "\x00",
                     "99999999999999999999"]) | prop_text), max_size=5)


@st.composite
def send_headers(draw):
    v2 = draw(st.booleans())
    names = ["b", "c", "d", "e", "f", "g", "h", "j", "l", "m", "i"] if v2 else [
        "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
        "bornTimestamp", "flag", "reconsumeTimes", "maxReconsumeTimes", "batch", "properties"]
    ext = {}
    for name, kind in zip(names, ["topic", "topic", "int", "int", "int", "int", "int", "int",
                                  "int", "flag", "props"]):
        if draw(st.integers(0, 9)) == 0:
            continue  # absent
        ext[name] = draw({"topic": st.sampled_from(["T", "", "%RETRY%g", "TBW102"]) | prop_text,
                          "int": header_ints, "flag": header_flags,
                          "props": prop_pairs.map(lambda ps: "".join(
                              f"{k}\x01{v}\x02" for k, v in ps))
                          .map(lambda t: t[:-1] if t and draw(st.booleans()) else t)
                          | st.text(max_size=30)}[kind])
    if draw(st.integers(0, 5)) == 0:
        ext["topic" if v2 else "b"] = "Other"  # both layouts' topic names at once
    return ext


def outcome(fn, ext):
    try:
        return "ok", fn(ext)
    except Exception as e:  # noqa: BLE001 - the point is to compare any error
        return "error", type(e), str(e)


@settings(max_examples=700, deadline=None)
@given(send_headers())
@example({"b": "T", "i": "\x00"})
@example({"b": "T", "i": "LMQ_DEDUP\x0112\x02DELAY\x01 3\x02"})
@example({"topic": "T", "queueId": "", "batch": "TRUE", "properties": "TAGS\x01\ud800"})
def test_read_send_twins_agree(ext):
    """The compiled read_send answers the usual header exactly as the pure twin does, and
    leaves the rest to it (None): with its fallback, the two agree on every header."""
    from ledgermq.wire import native
    pure, compiled = native.TWINS["read_send"]
    expected = outcome(pure, ext)
    if compiled is None:
        pytest.skip("the compiled module is not built")
    assert outcome(compiled, ext) == expected
    direct = native._native.read_send(ext)
    assert direct is None or ("ok", direct) == expected


def test_read_send_compiled_reads_the_headers_clients_send():
    """The usual headers (RocketMQ's C++ and Java clients, V1 and V2) never fall back: a
    fallback on them would be the slow path for every send."""
    from ledgermq.wire import native
    if native._native is None:
        pytest.skip("the compiled module is not built")
    props = "UNIQ_KEY\x01AC110001\x02WAIT\x01true\x02TAGS\x01tagA\x02KEYS\x01k1 k2\x02"
    v2 = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
          "g": "1700000000000", "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
    v1 = {"producerGroup": "g", "topic": "T", "defaultTopic": "TBW102",
          "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
          "bornTimestamp": "1700000000000", "flag": "0", "properties": props,
          "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
          "maxReconsumeTimes": "16"}
    for ext in (v1, v2):
        got = native._native.read_send(ext)
        assert got is not None
        assert got[0] == "T" and got[3] == 1 and got[5] == 1700000000000
        assert got[11:] == ("tagA", ["k1", "k2", "AC110001"], 0, 0)
