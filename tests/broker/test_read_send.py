"""read_send, the send header read in one call (#32): the compiled version answers the
headers clients send as its pure twin does, and leaves every unusual one to it. (Not run
per implementation: each test calls both.)"""
import pytest
from hypothesis import example, given, settings, strategies as st

from ledgermq.broker import send_parsing  # noqa: F401 (registers read_send with its twin)
from ledgermq.wire import native

from ..twins import outcome

prop_text = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02",
                                           blacklist_categories=("Cs",)), max_size=12)


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


@settings(max_examples=500, deadline=None)
@given(send_headers())
@example({"b": "T", "i": "\x00"})
@example({"b": "T", "i": "LMQ_DEDUP\x0112\x02DELAY\x01 3\x02"})
@example({"topic": "T", "queueId": "", "batch": "TRUE", "properties": "TAGS\x01\ud800"})
def test_read_send_twins_agree(ext):
    """The compiled read_send answers the usual header exactly as the pure twin does, and
    leaves the rest to it (None): with its fallback, the two agree on every header."""
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
