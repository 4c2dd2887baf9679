"""RocketMQ 5 messages to stored properties and back (broker/grpc/convert.py): what a gRPC
producer sets is what a gRPC consumer reads, and a remoting consumer sees RocketMQ's
property names."""
import hashlib

import pytest
from hypothesis import given, strategies as st

from ledgermq.apis import definition_pb2 as pb
from ledgermq.broker.grpc.convert import (
    GRPC_CODES, properties_of, timestamp, to_grpc, transaction_group,
)
from ledgermq.broker.refusals import Refused
from ledgermq.wire.message import Message, decode_message, encode_message

words = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E,
                              blacklist_characters="|\x01\x02"), min_size=1, max_size=12)


def stored(topic: str, body: bytes, props: dict[str, str]):
    return decode_message(encode_message(Message(topic, body, properties=props,
                                                 born_timestamp=1_700_000_000_123),
                                         store_timestamp=1_700_000_000_456))


@given(tag=words, keys=st.lists(words, max_size=3), group=st.none() | words,
       user=st.dictionaries(words.filter(lambda k: k.isalpha() and k.islower()), words,
                            max_size=4),
       body=st.binary(min_size=1, max_size=64))
def test_what_a_producer_sets_a_consumer_reads(tag, keys, group, user, body):
    sp = pb.SystemProperties(message_id="ID1", tag=tag, keys=keys, message_type=pb.NORMAL)
    if group is not None:
        sp.message_group = group
    m = pb.Message(topic=pb.Resource(name="T"), user_properties=user, system_properties=sp,
                   body=body)
    props = properties_of(m)
    assert props["TAGS"] == tag and props["UNIQ_KEY"] == "ID1"
    back = to_grpc(stored("T", body, props), receipt_handle="h", attempt=2,
                   invisible_ms=30_000)
    bs = back.system_properties
    assert (back.topic.name, back.body, bs.tag, list(bs.keys), bs.message_id) == \
        ("T", body, tag, keys, "ID1")
    assert dict(back.user_properties) == user
    assert (bs.message_group if bs.HasField("message_group") else None) == group
    assert bs.message_type == (pb.FIFO if group is not None else pb.NORMAL)
    assert bs.body_digest.checksum == hashlib.md5(body).hexdigest().upper()
    assert (bs.receipt_handle, bs.delivery_attempt) == ("h", 2)
    assert bs.born_timestamp.seconds == 1_700_000_000 and bs.born_timestamp.nanos == 123_000_000


def test_delivery_time_and_transactions_map_to_rocketmqs_properties():
    sp = pb.SystemProperties(message_id="ID2", message_type=pb.TRANSACTION)
    sp.delivery_timestamp.CopyFrom(timestamp(1_800_000_000_250))
    props = properties_of(pb.Message(topic=pb.Resource(name="Pay"), system_properties=sp,
                                     body=b"x"))
    assert props["TIMER_DELIVER_MS"] == "1800000000250"
    assert props["TRAN_MSG"] == "true" and props["PGROUP"] == transaction_group("Pay")


def test_the_body_digest_is_written_as_rocketmqs_clients_compute_it():
    """RocketMQ's proxy sends MD5 in upper-case hex, which the Java client
    (Utilities.md5CheckSum) and the Python client (Misc.md5_checksum) compare byte for byte
    and discard the message on a difference. Our CRC32, zero-padded, differed from the Java
    client's (no leading zeros) for one CRC in sixteen: its PushConsumer discarded those."""
    for body in (b"normal-23", b"normal-1", b""):  # (CRC32 0x0369D79B: a leading zero)
        digest = to_grpc(stored("T", body, {})).system_properties.body_digest
        assert (digest.type, digest.checksum) == \
            (pb.MD5, hashlib.md5(body).hexdigest().upper())


def test_a_redelivered_message_shows_its_original_topic():
    m = stored("%RETRY%billing", b"x", {"RETRY_TOPIC": "Orders", "UNIQ_KEY": "ID3"})
    assert to_grpc(m).topic.name == "Orders"


@pytest.mark.parametrize("change, code", [
    (lambda m: m.user_properties.__setitem__("TAGS", "x"), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (lambda m: m.system_properties.__setattr__("tag", "a|b"), pb.ILLEGAL_MESSAGE_TAG),
    (lambda m: m.system_properties.keys.append("two words"), pb.ILLEGAL_MESSAGE_KEY),
    (lambda m: m.system_properties.__setattr__("message_id", ""), pb.ILLEGAL_MESSAGE_ID),
    (lambda m: m.system_properties.__setattr__("message_group", ""), pb.ILLEGAL_MESSAGE_GROUP),
    (lambda m: m.user_properties.__setitem__("big", "x" * 20_000),
     pb.MESSAGE_PROPERTIES_TOO_LARGE),
])
def test_what_rocketmq_refuses_is_refused_with_a_reason(change, code):
    m = pb.Message(topic=pb.Resource(name="T"), body=b"x",
                   system_properties=pb.SystemProperties(message_id="ID"))
    change(m)
    with pytest.raises(Refused) as e:
        properties_of(m)
    assert GRPC_CODES[e.value.kind] == code and str(e.value)


def test_times_at_zero_and_a_first_attempt_are_still_sent():
    """Fields filled in place (convert.to_grpc_into) are present even at their zero: a
    client reads a born and a store time, an invisible duration and an attempt on every
    delivery, as when each was built apart and copied in."""
    m = stored("T", b"x", {"UNIQ_KEY": "ID4"})
    m.born_timestamp = m.store_timestamp = 0
    sp = to_grpc(m, receipt_handle="h", attempt=0, invisible_ms=0).system_properties
    for name in ("born_timestamp", "store_timestamp", "invisible_duration",
                 "delivery_attempt", "receipt_handle"):
        assert sp.HasField(name), name
    assert not sp.HasField("delivery_timestamp")
    assert not to_grpc(m).system_properties.HasField("invisible_duration")
