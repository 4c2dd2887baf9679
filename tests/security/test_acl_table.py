"""ACL as an allow-list per request code (#31): every request a broker serves has a declared
permission in one table (broker/access/rules.py), a code without one is refused, and the
requests that name a stored message are checked against that message, not against what
the client says. Raw signed frames from an account that may use only its own topic and
group, against a real `ledgermq dev` with aclEnable."""
import asyncio
import json
import re
from pathlib import Path

import pytest

from ledgermq.broker.access.accounts import PlainAcl
from ledgermq.broker.access.rules import RULES, markdown_table
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.remoting.signing import signer
from ledgermq.wire.message import (
    SYSFLAG_TRANSACTION_PREPARED, decode_offset_msg_id, encode_properties,
)

from ..dev_process import DevProcess
from .accounts import ACL, ADMIN, ALICE


@pytest.fixture(scope="module")
def acl_dev(tmp_path_factory):
    d = tmp_path_factory.mktemp("acl-dev")
    (d / "plain_acl.yml").write_text(ACL)
    p = DevProcess(d / "dev", {"aclEnable": "true", "aclFile": str(d / "plain_acl.yml")}).start()
    yield p
    p.stop()


async def _ask(addr: str, cmd: RemotingCommand, who) -> RemotingCommand:
    signer(*who)(cmd)
    client = RemotingClient()
    try:
        return await client.invoke(addr, cmd, 5)
    finally:
        await client.close()


def ask(dev, code, ext, who, body=None) -> RemotingCommand:
    return asyncio.run(_ask(dev.broker, RemotingCommand(code, ext=ext, body=body), who))


def send(dev, topic, who, props=None, sys_flag=0) -> int:
    """A message sent as `who`; its commit-log offset."""
    r = ask(dev, RequestCode.SEND_MESSAGE, {
        "producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": str(sys_flag),
        "bornTimestamp": "0", "flag": "0",
        "properties": encode_properties(props or {}).decode(), "reconsumeTimes": "0"},
        who, b"secret payload")
    assert r.code == ResponseCode.SUCCESS, r.remark
    return decode_offset_msg_id(r.ext.get("offsetMsgId") or r.ext["msgId"])[2]


def test_every_request_a_broker_serves_or_its_grpc_endpoint_asks_has_a_rule():
    """A new handler without a rule fails here (and is refused by a broker with ACL)."""
    from ledgermq.broker.modes import CheckpointMode, ClassicHAMode, ControllerMode, DLedgerMode
    from ledgermq.broker.modes import StandaloneMode
    from ledgermq.broker.processors import PROCESSORS
    served = set()
    for processor in PROCESSORS:
        served |= set(processor.handlers(processor.__new__(processor)))
    for mode in (StandaloneMode, ClassicHAMode, ControllerMode, DLedgerMode, CheckpointMode):
        served |= set(mode.handlers(mode.__new__(mode)))
    grpc = Path(__file__).parents[2] / "ledgermq" / "broker" / "grpc"
    for src in grpc.glob("*.py"):
        served |= {RequestCode[n] for n in re.findall(r"RequestCode\.([A-Z0-9_]+)",
                                                      src.read_text())}
    served.add(RequestCode.PEER_AUTH)
    assert len(served) > 35
    missing = sorted(RequestCode(c).name for c in served if c not in RULES)
    assert not missing, f"request codes without an ACL rule: {missing}"


def test_a_request_code_without_a_rule_is_refused_even_to_an_admin():
    acl = PlainAcl.from_doc({"accounts": [{"accessKey": "root", "secretKey": "root-secret",
                                           "admin": "true"}]})
    unknown = next(c for c in RequestCode if c not in RULES)
    why = acl.permission(acl.accounts["root"], unknown, {})
    assert why and "no ACL rule" in why


def test_readme_lists_every_rule():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert markdown_table() in readme, "README's ACL table is not the code's: regenerate it (python -m ledgermq.broker.access.rules)"


def test_a_message_by_id_needs_sub_on_its_own_topic(acl_dev):
    secret = send(acl_dev, "Secret", ADMIN)
    mine = send(acl_dev, "Alice", ALICE)
    r = ask(acl_dev, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(secret)}, ALICE)
    assert r.code == ResponseCode.NO_PERMISSION, r.remark
    assert "may not subscribe topic Secret" in r.remark
    assert not r.body
    r = ask(acl_dev, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(mine)}, ALICE)
    assert r.code == ResponseCode.SUCCESS and b"secret payload" in r.body


def test_offsets_of_another_topic_are_not_readable(acl_dev):
    send(acl_dev, "Secret", ADMIN)
    for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
                 RequestCode.GET_EARLIEST_MSG_STORETIME):
        r = ask(acl_dev, code, {"topic": "Secret", "queueId": "0"}, ALICE)
        assert r.code == ResponseCode.NO_PERMISSION, (code, r.remark)
    r = ask(acl_dev, RequestCode.GET_MAX_OFFSET, {"topic": "Alice", "queueId": "0"}, ALICE)
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_a_heartbeat_or_a_lock_needs_sub_on_the_group_and_its_topics(acl_dev):
    def heartbeat(group, topic):
        return json.dumps({"clientID": "hostile@1", "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "subscriptionDataSet": [
                {"topic": topic, "subString": "*", "tagsSet": [], "codeSet": []}]}],
            "producerDataSet": []}).encode()
    for group, topic, ok in (("bob-group", "Alice", False), ("alice-group", "Secret", False),
                             ("alice-group", "Alice", True)):
        r = ask(acl_dev, RequestCode.HEART_BEAT, {}, ALICE, heartbeat(group, topic))
        assert (r.code == ResponseCode.SUCCESS) is ok, (group, topic, r.remark)
    lock = json.dumps({"consumerGroup": "bob-group", "clientId": "hostile@1", "mqSet": [
        {"topic": "Alice", "brokerName": "broker-a", "queueId": 0}]}).encode()
    r = ask(acl_dev, RequestCode.LOCK_BATCH_MQ, {}, ALICE, lock)
    assert r.code == ResponseCode.NO_PERMISSION and "group bob-group" in r.remark


def test_a_send_back_needs_sub_on_the_topic_of_the_message_it_names(acl_dev):
    """Else a group could copy any message into its own retry topic and read it there."""
    secret = send(acl_dev, "Secret", ADMIN)
    r = ask(acl_dev, RequestCode.CONSUMER_SEND_MSG_BACK, {
        "group": "alice-group", "offset": str(secret), "delayLevel": "1",
        "originMsgId": "", "originTopic": "Alice", "maxReconsumeTimes": "16"}, ALICE)
    assert r.code == ResponseCode.NO_PERMISSION, r.remark
    assert "may not subscribe topic Secret" in r.remark


def test_ending_another_topics_transaction_is_refused(acl_dev):
    half = send(acl_dev, "Secret", ADMIN, {"TRAN_MSG": "true", "PGROUP": "pg"},
                SYSFLAG_TRANSACTION_PREPARED)
    r = ask(acl_dev, RequestCode.END_TRANSACTION, {
        "producerGroup": "pg", "tranStateTableOffset": "0", "commitLogOffset": str(half),
        "commitOrRollback": "8", "msgId": "", "transactionId": "t",
        "fromTransactionCheck": "false"}, ALICE)
    assert r.code == ResponseCode.NO_PERMISSION and "topic Secret" in r.remark, r.remark


def test_peer_requests_are_refused_with_acl_on_and_no_cluster_secret(acl_dev):
    """CONTROL_PROMOTE and the epoch cache belong to the cluster's servers: with ACL on
    they need the cluster secret, and this broker has none: refused, even to an admin."""
    for code in (RequestCode.CONTROL_PROMOTE, RequestCode.GET_BROKER_EPOCH_CACHE):
        r = ask(acl_dev, code, {}, ADMIN)
        assert r.code == ResponseCode.NO_PERMISSION and "no cluster secret" in r.remark, \
            (code, r.remark)
    assert "aclEnable=true and no cluster secret" in (acl_dev.data / "dev.log").read_text()


def test_only_the_producer_group_of_a_half_message_ends_it(dev_once):
    """RocketMQ's check ("The producer group wrong"), ACL or not: an offset is easy to
    guess, a transaction is its producer's."""
    async def scenario():
        client = RemotingClient()
        try:
            r = await client.invoke(dev_once.broker, RemotingCommand(
                RequestCode.SEND_MESSAGE, ext={
                    "producerGroup": "owner", "topic": "Tx", "defaultTopic": "TBW102",
                    "defaultTopicQueueNums": "4", "queueId": "0",
                    "sysFlag": str(SYSFLAG_TRANSACTION_PREPARED), "bornTimestamp": "0",
                    "flag": "0", "reconsumeTimes": "0", "properties": encode_properties(
                        {"TRAN_MSG": "true", "PGROUP": "owner"}).decode()},
                body=b"half"), 5)
            half = decode_offset_msg_id(r.ext.get("offsetMsgId") or r.ext["msgId"])[2]
            end = {"tranStateTableOffset": "0", "commitLogOffset": str(half),
                   "commitOrRollback": "8", "msgId": "", "transactionId": "t",
                   "fromTransactionCheck": "false"}
            other = await client.invoke(dev_once.broker, RemotingCommand(
                RequestCode.END_TRANSACTION, ext={**end, "producerGroup": "thief"}), 5)
            mine = await client.invoke(dev_once.broker, RemotingCommand(
                RequestCode.END_TRANSACTION, ext={**end, "producerGroup": "owner"}), 5)
            return other, mine
        finally:
            await client.close()
    other, mine = asyncio.run(scenario())
    assert other.code != ResponseCode.SUCCESS and "producer group wrong" in other.remark
    assert mine.code == ResponseCode.SUCCESS and "committed" in mine.remark, mine.remark


def test_a_group_sends_back_only_messages_of_topics_it_subscribes(dev_once):
    """ACL or not: a send-back copies the message at the offset into the group's retry
    topic, so the message must be one the group consumes."""
    async def scenario():
        client = RemotingClient()
        try:
            async def call(code, ext, body=None):
                return await client.invoke(dev_once.broker,
                                           RemotingCommand(code, ext=ext, body=body), 5)
            offsets = {}
            for topic in ("Mine", "NotMine"):
                r = await call(RequestCode.SEND_MESSAGE, {
                    "producerGroup": "p", "topic": topic, "defaultTopic": "TBW102",
                    "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
                    "bornTimestamp": "0", "flag": "0", "reconsumeTimes": "0",
                    "properties": ""}, b"x")
                offsets[topic] = decode_offset_msg_id(r.ext["msgId"])[2]
            beat = json.dumps({"clientID": "c@1", "producerDataSet": [], "consumerDataSet": [{
                "groupName": "g-mine", "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "subscriptionDataSet": [
                    {"topic": "Mine", "subString": "*", "tagsSet": [], "codeSet": []}]}]})
            assert (await call(RequestCode.HEART_BEAT, {}, beat.encode())).code == 0
            back = {"group": "g-mine", "delayLevel": "1", "originMsgId": "",
                    "originTopic": "Mine", "maxReconsumeTimes": "16"}
            return [await call(RequestCode.CONSUMER_SEND_MSG_BACK,
                               {**back, "offset": str(offsets[t])}) for t in ("NotMine", "Mine")]
        finally:
            await client.close()
    not_mine, mine = asyncio.run(scenario())
    assert not_mine.code == ResponseCode.NO_PERMISSION, not_mine.remark
    assert "topic NotMine, which no consumer of group g-mine" in not_mine.remark
    assert mine.code == ResponseCode.SUCCESS, mine.remark
