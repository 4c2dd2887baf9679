"""Heartbeats from a hostile client (#31): a heartbeat for a group the broker does not
know creates its %RETRY% topic only where auto-creation of groups is on, and a group name
that could not be a topic's gets a clear refusal."""
import asyncio
import json

import pytest

from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from ..dev_process import DevProcess


@pytest.fixture(scope="module")
def strict_dev(tmp_path_factory):
    p = DevProcess(tmp_path_factory.mktemp("strict"),
                   {"autoCreateSubscriptionGroup": "false"}).start()
    yield p
    p.stop()


def heartbeat(group: str) -> RemotingCommand:
    return RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps({
        "clientID": "hostile", "producerDataSet": [],
        "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": "CLUSTERING",
                             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                             "subscriptionDataSet": [], "unitMode": False}]}).encode())


async def ask(addr: str, *cmds: RemotingCommand) -> list[RemotingCommand]:
    client = RemotingClient()
    try:
        return [await client.invoke(addr, c, 5) for c in cmds]
    finally:
        await client.close()


def topics_of(addr: str) -> set[str]:
    r, = asyncio.run(ask(addr, RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG)))
    return set(json.loads(r.body)["topicConfigTable"])


def test_a_heartbeat_for_an_unknown_group_creates_no_retry_topic(strict_dev):
    replies = asyncio.run(ask(strict_dev.broker, *(heartbeat(f"g{i}") for i in range(50))))
    assert all(r.code == ResponseCode.SUCCESS for r in replies)
    made = {t for t in topics_of(strict_dev.broker) if t.startswith("%RETRY%g")}
    assert not made, sorted(made)[:5]


def test_a_group_name_that_cannot_be_a_topic_is_refused(dev_once):
    for bad in ("bad group!", "x" * 300):
        r, = asyncio.run(ask(dev_once.broker, heartbeat(bad)))
        assert r.code != ResponseCode.SUCCESS and "group" in r.remark, (r.code, r.remark)
        assert "%RETRY%" + bad not in topics_of(dev_once.broker)
