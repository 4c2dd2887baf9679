"""One convention for refusals (broker/refusals.py): every kind has its code in both
protocols' tables, so no refusal reaches a client as an internal error."""
from ledgermq.apis import definition_pb2 as pb
from ledgermq.broker.grpc.convert import GRPC_CODES
from ledgermq.broker.processors.refusal_codes import REMOTING_CODES
from ledgermq.broker.refusals import Kind
from ledgermq.remoting import ResponseCode


def test_every_kind_has_a_remoting_and_a_grpc_code():
    assert set(REMOTING_CODES) == set(Kind) == set(GRPC_CODES)


def test_only_a_failed_write_of_the_broker_is_an_internal_error_in_grpc():
    """A client's mistake is never answered as the server's own (gRPC clients retry those)."""
    internal = {k for k, code in GRPC_CODES.items() if code == pb.INTERNAL_SERVER_ERROR}
    assert internal == {Kind.STORE_REFUSED}
    assert REMOTING_CODES[Kind.TOO_MANY] == ResponseCode.SYSTEM_BUSY
