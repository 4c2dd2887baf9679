"""ACL 1.0 decisions (broker/access/accounts.py): who may send what where, from which address, and
what a broken plain_acl.yml says."""
import pytest

from ledgermq.broker.access.accounts import PlainAcl, address_matches
from ledgermq.remoting import RemotingCommand, RequestCode
from ledgermq.remoting.signing import signer

DOC = {"globalWhiteRemoteAddresses": ["10.1.1.*"], "accounts": [
    {"accessKey": "admin", "secretKey": "admin-secret", "admin": True},
    {"accessKey": "app", "secretKey": "app-secret", "whiteRemoteAddress": "192.168.{1,2}.*",
     "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
     "topicPerms": ["Orders=PUB|SUB", "Audit=SUB"], "groupPerms": ["Billing=DENY"]}]}


def signed(code, ext, body=b"", ak="app", sk="app-secret"):
    cmd = RemotingCommand(code, ext=dict(ext), body=body)
    signer(ak, sk)(cmd)
    return cmd.ext, cmd.body


def check(code, ext, ip="192.168.1.7", **kw):
    fields, body = signed(code, ext, **kw)
    return PlainAcl.from_doc(DOC).check(code, fields, body, ip)


def test_signed_requests_within_the_accounts_permissions_pass():
    assert check(RequestCode.SEND_MESSAGE, {"topic": "Orders"}, body=b"hello") is None
    assert check(RequestCode.PULL_MESSAGE, {"topic": "Audit", "consumerGroup": "g"}) is None
    assert check(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%g"}) is None  # group g: SUB


@pytest.mark.parametrize("code, ext, why", [
    (RequestCode.SEND_MESSAGE, {"topic": "Audit"}, "may not publish to topic Audit"),
    (RequestCode.SEND_MESSAGE_V2, {"b": "Other"}, "may not publish to topic Other"),
    (RequestCode.PULL_MESSAGE, {"topic": "Orders", "consumerGroup": "Billing"},
     "may not subscribe group Billing"),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "New"}, "not an admin"),
])
def test_what_the_account_may_not_do_is_refused_with_the_reason(code, ext, why):
    assert why in check(code, ext)


def test_signature_covers_the_fields_and_the_body():
    acl = PlainAcl.from_doc(DOC)
    fields, body = signed(RequestCode.SEND_MESSAGE, {"topic": "Orders"}, body=b"x")
    assert acl.check(RequestCode.SEND_MESSAGE, fields, b"y", "192.168.1.7") == \
        "wrong signature for account app"
    assert "wrong signature" in acl.check(RequestCode.SEND_MESSAGE,
                                          {**fields, "topic": "Audit"}, body, "192.168.1.7")
    assert "wrong signature" in check(RequestCode.SEND_MESSAGE, {"topic": "Orders"},
                                      sk="guessed")
    assert "no account with AccessKey nobody" in check(RequestCode.SEND_MESSAGE,
                                                       {"topic": "Orders"}, ak="nobody")
    assert "no AccessKey" in acl.check(RequestCode.SEND_MESSAGE, {"topic": "Orders"}, b"",
                                       "192.168.1.7")


def test_addresses_accounts_and_the_global_white_list():
    assert "may not connect from 172.16.0.1" in check(RequestCode.SEND_MESSAGE,
                                                      {"topic": "Orders"}, ip="172.16.0.1")
    assert PlainAcl.from_doc(DOC).check(RequestCode.UPDATE_AND_CREATE_TOPIC, {}, b"",
                                        "10.1.1.9") is None  # white: no signature needed
    assert check(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, ak="admin",
                 sk="admin-secret") is None


@pytest.mark.parametrize("pattern, ip, ok", [
    ("*", "1.2.3.4", True), ("192.168.0.*", "192.168.0.9", True),
    ("192.168.0.*", "192.168.1.9", False), ("10.0.0.1,10.0.0.2", "10.0.0.2", True),
    ("192.168.{1,2}.*", "192.168.2.3", True), ("192.168.{1,2}.*", "192.168.3.3", False),
    ("192.168.1.1-200", "192.168.1.200", True), ("192.168.1.1-200", "192.168.1.201", False),
])
def test_remote_address_patterns(pattern, ip, ok):
    assert address_matches(pattern, ip) is ok


@pytest.mark.parametrize("doc, why", [
    ({"accounts": [{"accessKey": "a"}]}, "needs accessKey and secretKey"),
    ({"accounts": [{"accessKey": "a", "secretKey": "short"}]}, "shorter than 6"),
    ({"accounts": [{"accessKey": "a", "secretKey": "secret", "defaultTopicPerm": "ALL"}]},
     "not one of DENY, PUB, SUB"),
    ({"accounts": [{"accessKey": "a", "secretKey": "secret", "topicPerms": ["T"]}]},
     "not NAME=PERMISSION"),
    (["not", "a", "mapping"], "must be a mapping"),
])
def test_a_broken_acl_file_says_what_is_wrong(doc, why):
    with pytest.raises(ValueError, match=why):
        PlainAcl.from_doc(doc)
