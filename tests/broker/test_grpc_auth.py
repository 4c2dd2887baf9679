"""A gRPC call's signature is checked once (broker/grpc/auth.py): its handler's wrapper
and the handler itself both ask who calls; the second is answered from the first."""
from types import SimpleNamespace

import pytest

from ledgermq.broker.access.accounts import Account
from ledgermq.broker.grpc.auth import authorize, caller
from ledgermq.broker.refusals import Kind, Refused


class Call:
    """A call's context as the endpoint gives it (metadata, peer)."""

    metadata = {"authorization": "sig", "x-mq-date-time": "20261129T100000Z"}

    def peer(self):
        return "ipv4:127.0.0.1:5000"


def broker_counting(refuse=False):
    checks = []

    def authenticate_grpc(authorization, date_time, ip, window_s):
        checks.append((authorization, date_time, ip))
        if refuse:
            raise Refused(Kind.UNAUTHORIZED, "bad signature")
        return Account("alice", "secret")
    acl = SimpleNamespace(current=lambda: SimpleNamespace(
        authenticate_grpc=authenticate_grpc))
    broker = SimpleNamespace(acl=acl, config=SimpleNamespace(aclSignatureWindowSeconds=900),
                             stats=SimpleNamespace(acl_denied={"grpc": 0}))
    return broker, checks


def test_a_call_is_authenticated_once_and_another_call_again():
    broker, checks = broker_counting()
    one, two = Call(), Call()
    authorize(broker, one)  # (the wrapper)
    assert caller(broker, one).access_key == "alice"  # (the handler)
    assert checks == [("sig", "20261129T100000Z", "127.0.0.1")]
    caller(broker, two)
    assert len(checks) == 2


def test_a_refused_signature_is_refused_every_time_it_is_asked():
    broker, checks = broker_counting(refuse=True)
    call = Call()
    for _ in range(2):
        with pytest.raises(Refused):
            caller(broker, call)
    assert len(checks) == 2 and broker.stats.acl_denied["grpc"] == 2
