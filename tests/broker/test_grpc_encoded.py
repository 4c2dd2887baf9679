"""A stored message's SendMessageResponse and an AckMessageResponse whose acks all held,
serialized by hand (broker/grpc/encoded.py), are byte for byte what protobuf serializes for
the same responses, so every client reads them as it reads protobuf's."""
from hypothesis import given
from hypothesis import strategies as st

from ledgermq.apis import definition_pb2 as pb
from ledgermq.apis import service_pb2 as svc
from ledgermq.broker.grpc import encoded


@given(st.text(max_size=80), st.integers(-2 ** 63, 2 ** 63 - 1), st.text(max_size=30))
def test_a_sent_answer_is_protobufs_own_bytes(message_id, offset, transaction_id):
    ok = pb.Status(code=pb.OK, message="OK")
    expected = svc.SendMessageResponse(status=ok, entries=[svc.SendResultEntry(
        status=ok, message_id=message_id, transaction_id=transaction_id, offset=offset)])
    got = encoded.sent(message_id, offset, transaction_id)
    assert got == expected.SerializeToString()
    assert svc.SendMessageResponse.FromString(got) == expected


def test_varints_at_their_edges():
    for n in (0, 1, 127, 128, 16383, 16384, 2 ** 31, 2 ** 63 - 1, -1, -2 ** 63):
        expected = svc.SendResultEntry(offset=n).SerializeToString()[1:] if n else b"\x00"
        assert encoded.varint(n) == expected


@given(st.lists(st.tuples(st.text(max_size=40), st.text(max_size=200)), max_size=5))
def test_an_acked_answer_is_protobufs_own_bytes(entries):
    ok = pb.Status(code=pb.OK, message="OK")
    expected = svc.AckMessageResponse(status=ok, entries=[svc.AckMessageResultEntry(
        message_id=m, receipt_handle=h, status=ok) for m, h in entries])
    got = encoded.acked(entries)
    assert got == expected.SerializeToString()
    assert svc.AckMessageResponse.FromString(got) == expected
