"""A call's metadata, whole (`Call.metadata`) or one key (`Call.metadata_value`): the same
answer either way, for any header list a client can send (keys repeated: the last value;
HTTP/2 pseudo-headers and gRPC's transport keys are not metadata)."""
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from ledgermq.grpcserver.call import Call

KEYS = [b":path", b":authority", b"content-type", b"te", b"grpc-timeout", b"grpc-encoding",
        b"grpc-accept-encoding", b"x-mq-client-id", b"authorization", b"x-mq-date-time",
        b"user-agent", b"k\xe9y"]
CONN = SimpleNamespace(settings_window=65535, peer_window=65535)


def call_with(headers):
    return Call(CONN, 1, headers, now=0.0)  # type: ignore[arg-type]


@given(st.lists(st.tuples(st.sampled_from(KEYS), st.binary(max_size=12)), max_size=20))
def test_one_keys_value_is_the_whole_metadatas(headers):
    c = call_with(headers)
    whole = call_with(headers).metadata
    for key in KEYS:
        name = key.decode("latin-1")
        assert c.metadata_value(name) == whole.get(name)
    assert c.metadata_value("absent") is None and c.metadata_value("ключ") is None


def test_a_key_sent_twice_reads_as_its_last_value_and_transport_keys_are_not_metadata():
    c = call_with([(b"x-mq-client-id", b"first"), (b"grpc-timeout", b"1S"),
                   (b"x-mq-client-id", b"last"), (b":path", b"/a/b")])
    assert c.metadata_value("x-mq-client-id") == "last"
    assert c.metadata_value("grpc-timeout") is None and c.metadata_value(":path") is None
