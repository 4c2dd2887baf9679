"""Signatures (#31): a remoting signature is compared in constant time and any bytes in
the field get a clear refusal; a RocketMQ 5 client's signature dates its x-mq-date-time,
and one older (or further ahead) than the window is refused, so a captured
authorization header cannot be replayed for good."""
import hashlib
import hmac
import time

import pytest

from ledgermq.broker.access.accounts import PlainAcl
from ledgermq.broker.refusals import Kind, Refused
from ledgermq.remoting.signing import sign

ACL = PlainAcl.from_doc({"accounts": [{"accessKey": "ak", "secretKey": "secret-key-123",
                                       "defaultTopicPerm": "PUB|SUB",
                                       "defaultGroupPerm": "SUB"}]})


def grpc_auth(date_time: str, secret: str = "secret-key-123") -> str:
    sig = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature={sig}"


def stamp(at: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))


def test_a_fresh_grpc_signature_is_taken_an_old_or_wrong_one_refused():
    now = time.time()
    account = ACL.authenticate_grpc(grpc_auth(stamp(now)), stamp(now), "10.0.0.1")
    assert account.access_key == "ak"
    for at in (now - 16 * 60, now + 16 * 60):  # outside the 15 minute window
        with pytest.raises(Refused, match="x-mq-date-time") as refused:
            ACL.authenticate_grpc(grpc_auth(stamp(at)), stamp(at), "10.0.0.1")
        assert refused.value.kind is Kind.UNAUTHORIZED
    with pytest.raises(Refused, match="x-mq-date-time"):
        ACL.authenticate_grpc(grpc_auth("garbage"), "garbage", "10.0.0.1")
    with pytest.raises(Refused, match="wrong signature"):
        ACL.authenticate_grpc(grpc_auth(stamp(now), "wrong"), stamp(now), "1.2.3.4")


def test_a_remoting_signature_of_any_bytes_gets_a_clear_refusal():
    fields = {"AccessKey": "ak", "topic": "T"}
    good = dict(fields, Signature=sign("secret-key-123", fields, b"body"))
    from ledgermq.remoting import RequestCode
    assert ACL.check(RequestCode.SEND_MESSAGE, good, b"body", "10.0.0.1") is None
    for bad in ("", "nonsense", "é" * 28, good["Signature"][:-1] + "x"):
        why = ACL.check(RequestCode.SEND_MESSAGE, dict(fields, Signature=bad), b"body",
                        "10.0.0.1")
        assert why == "wrong signature for account ak", why
