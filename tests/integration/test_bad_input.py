"""Malformed frames and bad requests against a real broker and name server: each gets an
error or a closed connection, the server keeps serving, stored messages stay intact."""
import asyncio
import json
import socket
import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from ledgermq import Message, Producer, PullConsumer, PullStatus
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

GARBAGE = [
    struct.pack(">i", 2**31 - 1) + b"\0" * 32,  # a 2 GB length
    struct.pack(">i", -1),
    struct.pack(">ii", 12, 8) + b"{not json",
    struct.pack(">ii", 8, (9 << 24) | 4) + b"abcd",  # unknown serialization type
    struct.pack(">ii", 30, (1 << 24) | 26) + b"\x00" * 4,  # binary header cut short
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
]


def send_raw(addr: str, data: bytes, wait: float = 0.5) -> bytes:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(data)
        s.settimeout(wait)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out


async def stored_bodies(namesrv: str, topic: str) -> list[bytes]:
    async with PullConsumer("check", namesrv) as c:
        out = []
        for q in await c.fetch_queues(topic):
            r = await c.pull(q, 0, 1000)
            if r.status is PullStatus.FOUND:
                out += [m.body for m in r.messages]
        return sorted(out)


def test_malformed_frames_do_not_hurt_the_servers(dev):
    d = dev()

    async def seed():
        async with Producer("p", d.namesrv) as p:
            for i in range(20):
                await p.send(Message("Safe", b"safe-%d" % i))
    asyncio.run(seed())
    before = asyncio.run(stored_bodies(d.namesrv, "Safe"))
    for addr in (d.broker, d.namesrv):
        for junk in GARBAGE:
            send_raw(addr, junk)
    assert asyncio.run(stored_bodies(d.namesrv, "Safe")) == before


def test_bad_requests_get_error_responses(dev):
    d = dev({"maxMessageSize": "2048"})

    async def main():
        client = RemotingClient()
        try:
            unknown = await client.invoke(d.broker, RemotingCommand(4242))
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            no_topic = await client.invoke(d.broker, RemotingCommand(RequestCode.SEND_MESSAGE_V2,
                                                                      ext={"a": "g"}, body=b"x"))
            assert no_topic.code == ResponseCode.SYSTEM_ERROR and "topic" in no_topic.remark
            bad_int = await client.invoke(d.broker, RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, ext={"b": "T", "e": "zero"}, body=b"x"))
            assert bad_int.code == ResponseCode.SYSTEM_ERROR and "queueId" in bad_int.remark
            too_big = await client.invoke(d.broker, RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, ext={"b": "Big", "e": "0"}, body=b"x" * 5000))
            assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in too_big.remark
            bad_topic = await client.invoke(d.broker, RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, ext={"b": "no spaces allowed"}, body=b"x"))
            assert bad_topic.code == ResponseCode.MESSAGE_ILLEGAL
            bad_batch = await client.invoke(d.broker, RemotingCommand(
                RequestCode.SEND_BATCH_MESSAGE, ext={"b": "T", "e": "0", "m": "true"},
                body=b"\x00\x00\x00\x50garbage"))
            assert bad_batch.code == ResponseCode.MESSAGE_ILLEGAL
            bad_queue = await client.invoke(d.broker, RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, ext={"b": "T", "e": "999"}, body=b"x"))
            assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "illegal" in bad_queue.remark
            pull_missing = await client.invoke(d.broker, RemotingCommand(
                RequestCode.PULL_MESSAGE, ext={"consumerGroup": "g", "topic": "Nope",
                                               "queueId": "0", "queueOffset": "0"}))
            assert pull_missing.code == ResponseCode.TOPIC_NOT_EXIST
            bad_heartbeat = await client.invoke(d.broker, RemotingCommand(
                RequestCode.HEART_BEAT, body=b"{broken"))
            assert bad_heartbeat.code == ResponseCode.SYSTEM_ERROR
            bad_id = await client.invoke(d.broker, RemotingCommand(
                RequestCode.VIEW_MESSAGE_BY_ID, ext={"offset": "123456789"}))
            assert bad_id.code == ResponseCode.SYSTEM_ERROR
            # still serving
            ok = await client.invoke(d.broker, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert ok.code == ResponseCode.SUCCESS and json.loads(ok.body)["table"]
        finally:
            await client.close()
    asyncio.run(main())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(min_size=1, max_size=200))
def test_random_bytes(dev_once, junk):
    d = dev_once
    send_raw(d.broker, junk, wait=0.05)
    send_raw(d.namesrv, junk, wait=0.05)


def test_servers_survive_random_bytes(dev_once):
    async def main():
        async with Producer("p", dev_once.namesrv) as p:
            r = await p.send(Message("AfterFuzz", b"still here"))
            return r.status.value
    assert asyncio.run(main()) == "SEND_OK"


def test_bodies_and_numbers_of_the_wrong_shape_get_clear_errors(dev_once):
    """What the request fuzzer (tests/security/test_request_fuzz.py) found failing with a
    traceback in a handler: a heartbeat whose consumers are not objects, a group config
    that is a list, a send whose numbers do not fit the stored message's fields."""
    async def main():
        client = RemotingClient()
        try:
            async def ask(code, ext=None, body=b""):
                return await client.invoke(dev_once.broker,
                                           RemotingCommand(code, ext=ext or {}, body=body), 5)
            beat = await ask(RequestCode.HEART_BEAT, body=b'{"consumerDataSet": [null]}')
            group = await ask(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"[]")
            send = await ask(RequestCode.SEND_MESSAGE_V2,
                             {"b": "Shapes", "e": "0", "g": str(1 << 64)}, b"x")
            lock = await ask(RequestCode.LOCK_BATCH_MQ,
                             body=b'{"consumerGroup": "g", "clientId": "c", "mqSet": [1]}')
            return beat, group, send, lock
        finally:
            await client.close()
    beat, group, send, lock = asyncio.run(main())
    assert "consumerDataSet is not a list of JSON objects" in beat.remark, beat.remark
    assert "the group config is not a JSON object" in group.remark, group.remark
    assert "bornTimestamp=18446744073709551616 does not fit in 64 bits" in send.remark
    assert "mqSet is not a list of JSON objects" in lock.remark, lock.remark
    log = (dev_once.data / "dev.log").read_text()
    assert "handler failed" not in log, log[-3000:]


def test_a_send_claiming_ipv6_host_layouts_is_stored_readable(dev_once):
    """sysFlag's BORNHOST_V6/STOREHOST_V6 bits say how wide the stored host fields are, which
    only the broker knows (it writes them). A client setting them used to store a message
    whose fields no reader could find: the queue's pulls failed, and a half message so
    flagged stopped every transaction check-back round. Now the broker's own layout wins."""
    d = dev_once
    flags = {"born v6": 0x10, "store v6": 0x20, "both": 0x30, "prepared, both": 0x34}

    async def send_and_read():
        client = RemotingClient()
        try:
            for name, flag in flags.items():
                r = await client.invoke(d.broker, RemotingCommand(
                    RequestCode.SEND_MESSAGE, ext={
                        "producerGroup": "pg", "topic": "HostLayout", "defaultTopic": "TBW102",
                        "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": str(flag),
                        "bornTimestamp": "1", "flag": "0", "properties": ""},
                    body=name.encode()), 10)
                assert r.code == ResponseCode.SUCCESS, (name, r.remark)
        finally:
            await client.close()
        return await stored_bodies(d.namesrv, "HostLayout")
    # (the prepared one is a half message: not in the topic until committed)
    assert asyncio.run(send_and_read()) == sorted(n.encode() for n in flags if "prepared" not in n)
