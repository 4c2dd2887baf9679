"""A stored message's SendMessageResponse, serialized by hand (broker/grpc/encoded.py), is
byte for byte what protobuf serializes for the same response, so every client reads it as
it reads protobuf's."""
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
