"""The remoting frame: both header serializations, and bad frames refused clearly."""
import json
import struct

import pytest
from hypothesis import given, settings, strategies as st

from ledgermq.remoting import (
    FLAG_RESPONSE, FrameError, FrameSplitter, RemotingCommand, SerializeType, decode_frame,
)

from ledgermq.remoting.command import _binary_header

from ..twins import outcome

pytestmark = pytest.mark.usefixtures("wire_impl")  # compiled and pure header readers

ext_values = st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=30), max_size=5)


@settings(max_examples=200, deadline=None)
@given(code=st.integers(0, 32767), opaque=st.integers(0, 2**31 - 1), flag=st.integers(0, 3),
       remark=st.none() | st.text(min_size=1, max_size=40), ext=ext_values,
       body=st.binary(max_size=200),
       stype=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))
def test_round_trip(code, opaque, flag, remark, ext, body, stype):
    cmd = RemotingCommand(code, opaque, flag, remark, ext, body, language="CPP",
                          serialize_type=stype)
    raw = cmd.to_bytes()
    assert struct.unpack(">i", raw[:4])[0] == len(raw) - 4
    back = decode_frame(raw[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext, back.body,
            back.language, back.serialize_type) == (code, opaque, flag, remark, ext, body,
                                                    "CPP", stype)


def test_response_keeps_the_callers_serialization():
    req = RemotingCommand(10, opaque=77, serialize_type=SerializeType.ROCKETMQ)
    resp = req.response(0, "ok", {"msgId": "AB"})
    assert resp.opaque == 77 and resp.flag & FLAG_RESPONSE
    assert resp.serialize_type is SerializeType.ROCKETMQ


def test_cpp_client_style_json_header():
    # the C++ client ends its JSON header with a newline and adds ACL fields
    header = (json.dumps({"code": 105, "language": "CPP", "version": 0, "opaque": 3,
                          "flag": 0, "remark": "", "extFields": {"topic": "T", "AccessKey": "",
                                                                 "Signature": "",
                                                                 "OnsChannel": "ALIYUN"}})
              + "\n").encode()
    frame = struct.pack(">i", len(header)) + header
    cmd = decode_frame(frame)
    assert cmd.code == 105 and cmd.ext["topic"] == "T" and cmd.language == "CPP"


def test_splitter_handles_partial_and_pipelined_frames():
    frames = b"".join(RemotingCommand(c, opaque=c, body=b"x" * c).to_bytes() for c in range(1, 6))
    sp = FrameSplitter()
    got = []
    for i in range(0, len(frames), 7):
        got += sp.feed(frames[i:i + 7])
    assert [c.code for c in got] == [1, 2, 3, 4, 5] and sp.buffered == 0


@pytest.mark.parametrize("raw,message", [
    (struct.pack(">i", 2**31 - 1) + b"xxxx", "frame length"),  # a 2 GB length
    (struct.pack(">i", -5), "frame length"),
    (struct.pack(">i", 2), "frame length"),
    (struct.pack(">ii", 8, 100) + b"abcd", "header length"),
    (struct.pack(">ii", 8, 4) + b"{{{{", "not valid JSON"),
    (struct.pack(">ii", 7, 3) + b"[1]", "not an object"),
    (struct.pack(">ii", 6, 2) + b"{}", "numeric code"),
    (struct.pack(">ii", 30, 26) + b'{"code":10,"opaque":1e30}\n', "32-bit"),  # unanswerable
    (struct.pack(">ii", 24, 20) + b'{"code":1e400,"x":1}', "not valid JSON"),
    (struct.pack(">ii", 8, (7 << 24) | 4) + b"abcd", "serialization type"),
    (struct.pack(">ii", 8, (1 << 24) | 4) + b"abcd", "truncated"),
    (struct.pack(">ii", 21, (1 << 24) | 17) + struct.pack(">hBhiii", 1, 0, 0, 0, 0, 99), "remark"),
])
def test_bad_frames_raise_frame_error(raw, message):
    with pytest.raises(FrameError, match=message):
        FrameSplitter(max_frame=1 << 20).feed(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_frame_error(data):
    try:
        FrameSplitter(max_frame=1 << 16).feed(data)
    except FrameError:
        pass


@settings(max_examples=400, deadline=None)
@given(remark=st.none() | st.text(max_size=20), ext=ext_values,
       fixed=st.tuples(st.integers(-2**15, 2**15 - 1), st.integers(0, 255),
                       st.integers(-2**15, 2**15 - 1), st.integers(-2**31, 2**31 - 1),
                       st.integers(-2**31, 2**31 - 1)),
       damage=st.tuples(st.sampled_from(["none", "cut", "set", "grow"]),
                        st.integers(0, 10_000), st.integers(0, 255)))
def test_binary_header_twins_agree(remark, ext, fixed, damage):
    """The compiled binary-header reader answers as the pure twin on intact and damaged
    headers (negative lengths, lengths past the end, invalid UTF-8), and leaves every
    malformed one to the twin's FrameError."""
    from ledgermq.wire import native
    pure, compiled = native.TWINS["binary_header_fields"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    code, lang, version, opaque, flag = fixed
    raw = _binary_header(code & 0x7FFF, "JAVA", 0, opaque, flag, remark, ext)
    raw = struct.pack(">hBhii", code, lang, version, opaque, flag) + raw[13:]
    kind, at, value = damage
    if raw and kind != "none":
        at %= len(raw)
        raw = raw[:at] if kind == "cut" else raw[:at] + bytes([value]) + raw[at + 1:] \
            if kind == "set" else raw + bytes([value]) * (at % 25)
    expected = outcome(pure, raw)
    if kind == "none":
        assert expected[0] == "ok" and expected[1][5:] == (remark or None, ext)
    assert outcome(compiled, raw) == expected
    direct = native._native.binary_header_fields(raw)
    assert direct is None or ("ok", direct) == expected


json_scalars = st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(
    allow_nan=False, allow_infinity=False) | st.text(max_size=12)


@settings(max_examples=500, deadline=None)
@given(numbers=st.lists(st.sampled_from(["code", "opaque", "flag", "version"]).flatmap(
           lambda k: st.tuples(st.just(k), st.integers(-2**31 - 2, 2**31 + 1) | json_scalars)),
           max_size=5),
       language=st.sampled_from(["JAVA", "CPP", "", "\u00e9"]) | json_scalars,
       remark=json_scalars, ext=st.dictionaries(st.text(max_size=8), st.text(max_size=30)
                                                | json_scalars, max_size=6) | json_scalars,
       other=st.dictionaries(st.text(max_size=6), json_scalars | st.lists(st.integers()),
                             max_size=2),
       spacing=st.sampled_from([None, 2]), escapes=st.booleans(),
       damage=st.tuples(st.sampled_from(["none", "cut", "set", "grow"]),
                        st.integers(0, 10_000), st.integers(0, 255)))
def test_json_header_twins_agree(numbers, language, remark, ext, other, spacing, escapes,
                                 damage):
    """The compiled JSON-header reader answers as the pure twin (orjson's reading) on the
    headers clients send and on odd ones: numbers of every JSON form and size, keys given
    twice, escapes of every kind, null and non-string values, spacing, damaged bytes. It
    leaves every header it cannot read to the twin (None), never answering otherwise."""
    from ledgermq.wire import native
    pure, compiled = native.TWINS["json_header_fields"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    fields = [f'"{k}":{json.dumps(v)}' for k, v in numbers]
    fields += [f'"language":{json.dumps(language)}', f'"remark":{json.dumps(remark)}',
               f'"extFields":{json.dumps(ext, ensure_ascii=escapes, indent=spacing)}']
    fields += [f'{json.dumps(k)}:{json.dumps(v, ensure_ascii=escapes)}' for k, v in other.items()]
    raw = ("{" + (",\n " if spacing else ",").join(fields) + "}").encode()
    kind, at, value = damage
    if kind != "none":
        at %= len(raw)
        raw = raw[:at] if kind == "cut" else raw[:at] + bytes([value]) + raw[at + 1:] \
            if kind == "set" else raw + bytes([value]) * (at % 25)
    expected = outcome(pure, raw)
    assert outcome(compiled, raw) == expected
    direct = native._native.json_header_fields(raw)
    assert direct is None or ("ok", direct) == expected


@pytest.mark.parametrize("raw", [
    b'{"code":01}', b'{"code":-}', b'{"code":-0}', b'{"code":1.0}', b'{"code":1e2}',
    b'{"code":true}', b'{"code":"5"}', b'{"code":2147483648}', b'{"code":-2147483648}',
    b'{"code":99999999999999999999999}', b'{"code":1,}', b'{"code":1}x', b'{"code":1} \n',
    b'\xef\xbb\xbf{"code":1}', b'{"code":1,"extFields":{"a":"1"},"extFields":{"b":"2"}}',
    b'{"code":1,"extFields":{"a":"1","a":"2"}}', b'{"code":1,"extFields":{"a":5}}',
    b'{"code":1,"extFields":{"a":-0}}', b'{"code":1,"extFields":{"a":01}}',
    b'{"code":1,"extFields":{"a":1.5}}', b'{"code":1,"extFields":{"a":1e3}}',
    b'{"code":1,"extFields":{"a":-}}', b'{"code":1,"extFields":{"a":true}}',
    b'{"code":1,"extFields":{"a":99999999999999999999999}}',
    b'{"code":1,"extFields":{"a":999999999999999999,"b":-999999999999999999}}',
    b'{"code":1,"extFields":{"a":5,"a":"5"}}', b'{"code":1,"extFields":{"a":5 }}',
    b'{"code":1,"extFields":null}', b'{"code":1,"extFields":""}', b'{"code":1,"extFields":[]}',
    b'{"code":1,"remark":"\\ud800"}', b'{"code":1,"remark":"\\udc00x"}',
    b'{"code":1,"remark":"\\ud83d\\ude00"}', b'{"code":1,"remark":"a\x01b"}',
    b'{"code":1,"remark":"\xff"}', b'{"code":1,"\xff":1}', b'{"code":1,"x":{"y":1}}',
    b'{"code":1,"x":[1]}', b'{"code":1,"x":nul}', b'{"code":1,"language":null}',
    b'{"code":1,"language":7}', b'{"code":1,"remark":5}', b'{"code":1,"remark":"\\q"}',
    b'{"code":1,"remark":"\\u00zz"}', b'{"\\u0063ode":4}', b'{"code":1 , "flag" : 2 }',
    b'{}', b'[]', b'', b'{"code":1,"remark":"unterminated}',
])
def test_json_header_odd_forms_agree(raw):
    from ledgermq.wire import native
    pure, compiled = native.TWINS["json_header_fields"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    assert outcome(compiled, raw) == outcome(pure, raw)
    direct = native._native.json_header_fields(raw)
    assert direct is None or ("ok", direct) == outcome(pure, raw)


def test_json_header_of_a_client_is_read_without_the_twin():
    """What RocketMQ's clients send (escaped separators in the properties, a trailing
    newline, unknown keys) is read by the compiled reader itself."""
    from ledgermq.wire import native
    if native._native is None:
        pytest.skip("the compiled module is not built")
    raw = (b'{"code":310,"language":"CPP","version":399,"opaque":3,"flag":0,'
           b'"serializeTypeCurrentRPC":"JSON","extFields":{"b":"T","i":'
           b'"UNIQ_KEY\\u0001AB\\u0002WAIT\\u0001true\\u0002","k":"caf\\u00e9 \\ud83d\\ude00"}}\n')
    assert native._native.json_header_fields(raw) == (
        310, "CPP", 399, 3, 0, None,
        {"b": "T", "i": "UNIQ_KEY\x01AB\x02WAIT\x01true\x02", "k": "caf\u00e9 \U0001f600"})


def test_json_header_of_the_cpp_client_is_read_without_the_twin():
    """RocketMQ's C++ client (0.4.4, as captured from `bench/request_bench.py`) sends
    SEND_MESSAGE with integers among its extFields (queueId, sysFlag, flag,
    defaultTopicQueueNums): the compiled reader takes them as the text Java reads, without
    handing every such request to the twin."""
    from ledgermq.wire import native
    if native._native is None:
        pytest.skip("the compiled module is not built")
    raw = (b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":'
           b'"yO1kO/80cA+95sAaBgL6jxgKeMo=","batch":"0","bornTimestamp":"1795928744418",'
           b'"defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":'
           b'"bench-req","properties":"UNIQ_KEY\\u00010100007F0000F8CE00006244A7960100'
           b'\\u0002WAIT\\u0001true\\u0002","queueId":-3,"reconsumeTimes":"0","sysFlag":'
           b'2147483648000,"topic":"BenchRequests","unitMode":"0"},"flag":0,"language":'
           b'"CPP","opaque":2,"remark":"","version":63}\n')
    pure, _ = native.TWINS["json_header_fields"]
    read = native._native.json_header_fields(raw)
    assert read == pure(raw)
    assert read[6]["defaultTopicQueueNums"] == "4" and read[6]["queueId"] == "-3"
    assert read[6]["sysFlag"] == "2147483648000" and read[6]["flag"] == "0"


# (no lone surrogates: those are in the odd values)
header_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30)
odd_values = st.none() | st.integers(-5, 5) | st.text(max_size=3) | st.just("\ud800")


@settings(max_examples=500, deadline=None)
@given(stype=st.sampled_from([0, 1, 7, SerializeType.JSON, SerializeType.ROCKETMQ]),
       numbers=st.tuples(*[st.integers(-2**15, 2**15 - 1) | st.integers(-2**63, 2**63)
                           | st.booleans()] * 4),
       language=st.sampled_from(["JAVA", "CPP", "PYTHON", "RUST", "NOPE", ""]) | st.just(3),
       remark=st.none() | header_text | st.just("\ud800") | st.just(5),
       ext=st.dictionaries(header_text, header_text, max_size=6)
       | st.dictionaries(header_text | st.integers(0, 3), odd_values, max_size=4),
       body_len=st.integers(0, 200) | st.just(2**31))
def test_frame_head_twins_agree(stype, numbers, language, remark, ext, body_len):
    """The compiled frame-head writer writes what the pure twin writes, byte for byte
    (JSON as orjson escapes it, the binary layout), on usual and odd headers (numbers past
    their widths, bools, lone surrogates, non-str values); where it declines, the twin
    answers or raises as before."""
    from ledgermq.wire import native
    pure, compiled = native.TWINS["encode_head"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    code, version, opaque, flag = numbers
    args = (stype, code, language, version, opaque, flag, remark, ext, body_len)
    expected = outcome(pure, *args)
    assert outcome(compiled, *args) == expected
    direct = native._native.encode_head(*args)
    assert direct is None or ("ok", direct) == expected


def test_frame_head_of_a_send_reply_is_compiled():
    """A usual reply (what every send gets) is written by the compiled writer, not left to
    the twin; and it reads back."""
    from ledgermq.wire import native
    if native.TWINS["encode_head"][1] is None:
        pytest.skip("the compiled module is not built")
    for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
        req = RemotingCommand(310, opaque=9, language="CPP", serialize_type=stype)
        resp = req.response(0, None, {"msgId": "AC11", "queueId": "1", "queueOffset": "7"})
        args = (stype, 0, "JAVA", resp.version, 9, FLAG_RESPONSE, None, resp.ext, 0)
        head = native._native.encode_head(*args)
        assert head is not None and head == resp.to_bytes()
        back = decode_frame(head[4:])
        assert (back.code, back.opaque, back.ext["queueOffset"]) == (0, 9, "7")


def frame_bytes(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(b) for b in cmd.encode())


frame_commands = st.builds(
    RemotingCommand, code=st.integers(0, 32767), opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3), remark=st.none() | header_text, ext=ext_values,
    body=st.binary(max_size=60), language=st.sampled_from(["JAVA", "CPP", "PYTHON", "GO"]),
    serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]))


@settings(max_examples=400, deadline=None)
@given(cmds=st.lists(frame_commands, max_size=4), tail=st.integers(0, 200),
       damage=st.none() | st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
       max_frame=st.sampled_from([4, 40, 300, 1 << 24]))
def test_frames_in_twins_agree(cmds, tail, damage, max_frame):
    """The compiled reader of a read's frames answers as the pure twin on streams of whole
    frames of both header encodings, a part-frame at the end, a byte set anywhere (a
    length, a header word, a header, a body), and frames past the limit: the same
    commands and bytes used, or the same FrameError; None only where the twin judges."""
    from ledgermq.wire import native
    pure, compiled = native.TWINS["frames_in"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    stream = bytearray(b"".join(frame_bytes(c) for c in cmds))
    if cmds:
        stream += frame_bytes(cmds[0])[:tail]  # a frame not yet whole
    if damage and stream:
        stream[damage[0] % len(stream)] = damage[1]
    for buf in (bytes(stream), stream):  # as a read gives it, and as the splitter buffers
        expected = outcome(pure, buf, max_frame)
        assert outcome(compiled, buf, max_frame) == expected
        direct = native._native.frames_in(buf, max_frame)
        assert direct is None or ("ok", direct) == expected


def test_frames_in_reads_clients_frames_without_the_twin():
    """Both header encodings as clients send them are decoded by the compiled reader
    itself, up to a frame not yet whole."""
    from ledgermq.wire import native
    if native._native is None:
        pytest.skip("the compiled module is not built")
    cmds = [RemotingCommand(310, 7, 0, None, {"b": "T", "i": "KEYS\x01k\x02"}, b"hi", "CPP",
                            399, stype) for stype in (SerializeType.JSON, SerializeType.ROCKETMQ)]
    stream = b"".join(map(frame_bytes, cmds))
    got = native._native.frames_in(stream + frame_bytes(cmds[0])[:9], 1 << 20)
    assert got == (cmds, len(stream))


GOOD_FRAME = frame_bytes(RemotingCommand(10, 1, 0, None, {"a": "b"}, b"xy"))


def _odd_streams():
    good = GOOD_FRAME
    head = good[4:]
    word = struct.unpack(">i", head[:4])[0]
    for length in (-1, -2**31, 0, 1, 2, 3, 4, 5, 7, 8):
        yield struct.pack(">i", length) + head  # lengths too small, or cutting the header
    yield struct.pack(">i", 4) + struct.pack(">i", 0)  # a header word and nothing else
    for stype in (2, 0x16, 0xFF):
        yield good[:4] + struct.pack(">I", stype << 24 | word & 0xFFFFFF) + head[4:]
    yield good[:4] + struct.pack(">I", word & 0xFF000000 | 0xFFFFFF) + head[4:]  # header past
    yield good[:4] + struct.pack(">I", word + 1) + head[4:]  # header runs into the body
    yield b"\x00\x00\x00\x00"  # a bare zero length: nothing after it to read
    yield b"\x00\x00\x00\x03abc"
    yield good + b"\x16\x03\x01\x02\x00"  # then a TLS handshake
    yield good * 2 + struct.pack(">i", 1 << 30)  # then a length past the limit


@pytest.mark.parametrize("stream", list(_odd_streams()))
@pytest.mark.parametrize("max_frame", [4, len(GOOD_FRAME) - 4, 1 << 24])  # (the middle:
# exactly the good frame's length)
def test_frames_in_odd_streams_agree(stream, max_frame):
    from ledgermq.wire import native
    pure, compiled = native.TWINS["frames_in"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    expected = outcome(pure, stream, max_frame)
    assert outcome(compiled, stream, max_frame) == expected
    direct = native._native.frames_in(stream, max_frame)
    assert direct is None or ("ok", direct) == expected


def test_json_header_names_seen_before_are_told_apart():
    """The compiled reader keeps the names it read as str, in fewer slots than names:
    headers of many names of one length (every slot shared) read as the twin reads them,
    names and values paired as sent, read twice."""
    from ledgermq.wire import native
    pure, compiled = native.TWINS["json_header_fields"]
    if compiled is None:
        pytest.skip("the compiled module is not built")
    names = [a + b for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz"]
    for order in (names, names[::-1]):
        raw = json.dumps({"code": 1, "language": order[0].upper(),
                          "extFields": {n: f"v-{n}" for n in order}}).encode()
        for _ in range(2):
            direct = native._native.json_header_fields(raw)
            assert direct is not None and ("ok", direct) == outcome(pure, raw)
            assert direct[6] == {n: f"v-{n}" for n in names} and direct[1] == order[0].upper()
