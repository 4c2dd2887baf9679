"""What RocketMQ's proxy in cluster mode asks a broker, sent to a real broker as the proxy
sends it. POP over remoting (its header fields, its extra info built from the pop answer
as its client builds it): pop, ack, change the invisible time, batch ack, the retried
message's round trip through the retry topic, hostile receipts refused with a clear
answer. A group's config, a topic's message type (RocketMQ's `updateTopic -a`), and a
half message's transaction id in its send answer."""
import asyncio
import base64
import json

import pytest

from ledgermq import Message, Producer
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.wire.message import decode_message

from .load import read_all
from .test_consumer_groups_admin import send

GROUP = "proxy-pop"


def pop_request(topic: str, n: int = 32, invisible_ms: int = 30_000, poll_ms: int = 0,
                group: str = GROUP, exp: str = "*") -> RemotingCommand:
    # RocketMQ's proxy: every queue of the broker (-1), bornTime never set, initMode MAX
    return RemotingCommand(RequestCode.POP_MESSAGE, ext={
        "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(n),
        "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": "0",
        "initMode": "1", "expType": "TAG", "exp": exp, "order": "false"}, language="JAVA")


def receipts(resp: RemotingCommand, broker: str) -> list[tuple[str, int, str, bytes]]:
    """(extra info, queue offset, topic, body) of each popped message, the extra info
    built as RocketMQ's client builds it: ckQueueOffset popTime invisibleTime reviveQid
    retryFlag brokerName queueId queueOffset."""
    h = resp.ext
    start = {f"{e.split(' ')[0]}@{e.split(' ')[1]}": e.split(" ")[2]
             for e in h["startOffsetInfo"].split(";")}
    offsets = {f"{e.split(' ')[0]}@{e.split(' ')[1]}": e.split(" ")[2].split(",")
               for e in h["msgOffsetInfo"].split(";")}
    seen: dict[str, int] = {}
    out = []
    body, pos = bytes(resp.body), 0
    while pos < len(body):
        m = decode_message(body[pos:])
        pos += m.total_size
        flag = "1" if m.topic.startswith("%RETRY%") else "0"
        key = f"{flag}@{m.queue_id}"
        index = seen[key] = seen.get(key, -1) + 1
        assert int(offsets[key][index]) == m.queue_offset
        extra = " ".join([start[key], h["popTime"], h["invisibleTime"], h["reviveQid"], flag,
                          broker, str(m.queue_id), offsets[key][index]])
        out.append((extra, m.queue_offset, m.topic, m.body))
    return out


def ack_request(code: int, topic: str, extra: str, offset: int, group: str = GROUP,
                **more: str) -> RemotingCommand:
    return RemotingCommand(code, ext={"consumerGroup": group, "topic": topic,
                                      "queueId": (extra.split(" ") + ["0"] * 7)[6],
                                      "extraInfo": extra,
                                      "offset": str(offset), **more}, language="JAVA")


def test_pop_ack_and_change_invisible_as_rocketmqs_proxy_sends_them(dev):
    d = dev()

    async def main():
        await send(d.namesrv, "ProxyPop", [b"m-%d" % i for i in range(6)])
        client = RemotingClient()
        try:
            resp = await client.invoke(d.broker, pop_request("ProxyPop"), 5)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            got = receipts(resp, "broker-a")
            assert sorted(b for *_, b in got) == [b"m-%d" % i for i in range(6)]
            # nothing more while they are invisible: the poll times out
            empty = await client.invoke(d.broker, pop_request("ProxyPop", poll_ms=200), 5)
            assert empty.code == ResponseCode.POLLING_TIMEOUT
            # one ack each, except m-0 (given 1 s more) and m-1 (acked twice over below)
            keep = {extra: (off, body) for extra, off, _, body in got}
            for extra, (off, body) in keep.items():
                if body in (b"m-0",):
                    r = await client.invoke(d.broker, ack_request(
                        RequestCode.CHANGE_MESSAGE_INVISIBLETIME, "ProxyPop", extra, off,
                        invisibleTime="1000"), 5)
                    assert r.code == ResponseCode.SUCCESS, r.remark
                    assert int(r.ext["invisibleTime"]) == 1000 and int(r.ext["popTime"]) > \
                        int(extra.split(" ")[1])
                    stale = await client.invoke(d.broker, ack_request(
                        RequestCode.ACK_MESSAGE, "ProxyPop", extra, off), 5)
                    assert stale.code == ResponseCode.NO_MESSAGE  # its old receipt
                    continue
                r = await client.invoke(d.broker, ack_request(
                    RequestCode.ACK_MESSAGE, "ProxyPop", extra, off), 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
            # m-0 comes back after its second, 1 s invisibility: from the retry topic
            again = await client.invoke(d.broker, pop_request("ProxyPop", poll_ms=5000), 8)
            assert again.code == ResponseCode.SUCCESS, again.remark
            [(extra, off, topic, body)] = receipts(again, "broker-a")
            assert (body, topic, extra.split(" ")[4]) == (b"m-0", f"%RETRY%{GROUP}", "1")
            # the proxy acks a retried message under %RETRY%<group>_<topic>
            r = await client.invoke(d.broker, ack_request(
                RequestCode.ACK_MESSAGE, f"%RETRY%{GROUP}_ProxyPop", extra, off), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            done = await client.invoke(d.broker, pop_request("ProxyPop", poll_ms=1500), 5)
            assert done.code == ResponseCode.POLLING_TIMEOUT
        finally:
            await client.close()
    asyncio.run(main())


def test_batch_ack_names_offsets_by_a_bit_set(dev):
    d = dev()

    async def main():
        async with Producer("batch-ack-p", d.namesrv) as p:
            q = (await p.queues("ProxyBatchAck"))[0]
            for i in range(10):
                await p.send(Message("ProxyBatchAck", b"b-%d" % i), q)
        client = RemotingClient()
        try:
            resp = await client.invoke(d.broker, pop_request("ProxyBatchAck", n=10), 5)
            got = receipts(resp, "broker-a")
            assert len(got) == 10
            start = min(off for _, off, _, _ in got)
            acked = [off for _, off, _, body in got if body != b"b-3"]
            bits = bytearray(2)
            for off in acked:  # java.util.BitSet.toByteArray: bit i of byte j is 8j + i
                bits[(off - start) // 8] |= 1 << ((off - start) % 8)
            extra = got[0][0].split(" ")
            body = {"brokerName": "broker-a", "acks": [{
                "c": GROUP, "t": "ProxyBatchAck", "r": "0", "so": start, "q": int(extra[6]),
                "rq": 0, "pt": int(extra[1]), "it": int(extra[2]),
                "b": base64.b64encode(bytes(bits)).decode()}]}
            r = await client.invoke(d.broker, RemotingCommand(
                RequestCode.BATCH_ACK_MESSAGE, body=json.dumps(body).encode()), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            # the one left out comes back once its invisibility ends; the rest do not
            resp = await client.invoke(d.broker, pop_request("ProxyBatchAck", n=10,
                                                              invisible_ms=1000), 5)
            assert resp.code == ResponseCode.POLLING_TIMEOUT
        finally:
            await client.close()
    asyncio.run(main())


HOSTILE = [("garbage", "not a receipt"),
           ("0 1 2 0 0 broker-b 0 0", "of broker broker-b"),  # another broker's
           ("0 notanumber 30000 0 0 {b} 0 0", "not a receipt"),
           ("0 1 30000 0 0 {b} 0 0", "expired")]  # never delivered


def test_hostile_receipts_are_refused_clearly(dev):
    d = dev()

    async def main():
        await send(d.namesrv, "ProxyHostile", [b"x"])
        client = RemotingClient()
        try:
            await client.invoke(d.broker, pop_request("ProxyHostile"), 5)
            broker = "broker-a"
            for extra, why in HOSTILE:
                for code in (RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
                    r = await client.invoke(d.broker, ack_request(
                        code, "ProxyHostile", extra.format(b=broker), 0,
                        invisibleTime="5000"), 5)
                    assert r.code != ResponseCode.SUCCESS and why in (r.remark or ""), (extra, r)
            bad = await client.invoke(d.broker, RemotingCommand(
                RequestCode.BATCH_ACK_MESSAGE, body=b'{"acks": [{"c": "g", "t": "ProxyHostile",'
                b' "so": 0, "q": 0, "pt": 1, "it": 1, "b": "%%%"}]}'), 5)
            assert bad.code != ResponseCode.SUCCESS and "base64" in (bad.remark or "")
            huge = base64.b64encode(bytes([255]) * 100_000).decode()  # 800,000 offsets
            bad = await client.invoke(d.broker, RemotingCommand(
                RequestCode.BATCH_ACK_MESSAGE, body=json.dumps({"acks": [{
                    "c": "g", "t": "ProxyHostile", "so": 0, "q": 0, "pt": 1, "it": 1,
                    "b": huge}]}).encode()), 5)
            assert bad.code != ResponseCode.SUCCESS and "at most" in (bad.remark or "")
            # the broker still serves
            ok = await client.invoke(d.broker, pop_request("ProxyHostile", invisible_ms=1000), 5)
            assert ok.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT)
        finally:
            await client.close()
    asyncio.run(main())


def test_group_config_topic_type_and_transaction_id_as_the_proxy_reads_them(dev):
    d = dev()

    async def main():
        client = RemotingClient()
        try:
            r = await client.invoke(d.broker, RemotingCommand(
                RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, ext={"group": "proxy-reads"}), 5)
            assert r.code == ResponseCode.SUCCESS and json.loads(r.body)["groupName"] == \
                "proxy-reads"  # (made on first use, as a first pull would)
            for attributes, expected in (("", "MIXED"), ("+message.type=FIFO", "FIFO")):
                topic = f"ProxyType{expected}"
                r = await client.invoke(d.broker, RemotingCommand(
                    RequestCode.UPDATE_AND_CREATE_TOPIC, ext={
                        "topic": topic, "readQueueNums": "1", "writeQueueNums": "1",
                        "attributes": attributes}), 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
                r = await client.invoke(d.broker, RemotingCommand(
                    RequestCode.GET_TOPIC_CONFIG, ext={"topic": topic, "lo": "true"}), 5)
                assert json.loads(r.body)["attributes"] == {"message.type": expected}
            for bad in ("+message.type=LIFO", "+retention=3d", "message.type=FIFO"):
                r = await client.invoke(d.broker, RemotingCommand(
                    RequestCode.UPDATE_AND_CREATE_TOPIC, ext={
                        "topic": "ProxyTypeBad", "attributes": bad}), 5)
                assert r.code != ResponseCode.SUCCESS and "message.type" in r.remark, r
            # a half message's answer names its transaction by its UNIQ_KEY
            half = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext={
                "a": "tx-p", "b": "ProxyTypeMIXED", "c": "TBW102", "d": "4", "e": "0",
                "f": str(0x4), "g": "0", "h": "0", "j": "0",
                "i": "UNIQ_KEY\x01AC1100010000ABCD\x02TRAN_MSG\x01true\x02"}, body=b"tx")
            r = await client.invoke(d.broker, half, 5)
            assert r.code == ResponseCode.SUCCESS and \
                r.ext["transactionId"] == "AC1100010000ABCD", r
            plain = await client.invoke(d.broker, RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, ext={**half.ext, "f": "0"}, body=b"x"), 5)
            assert "transactionId" not in plain.ext
        finally:
            await client.close()
    asyncio.run(main())


def test_forward_to_dead_letters_as_the_proxy_sends_it(dev):
    """RocketMQ's proxy sends no consumer heartbeat: a group that pops a topic here may
    send its messages to its dead-letter queue (CONSUMER_SEND_MSG_BACK, delay level -1,
    then an ack); a group that never popped it may not."""
    d = dev()

    async def main():
        await send(d.namesrv, "ProxyDead", [b"poison"])
        client = RemotingClient()
        try:
            resp = await client.invoke(d.broker, pop_request("ProxyDead"), 5)
            [(extra, off, _, _)] = receipts(resp, "broker-a")
            phys = decode_message(bytes(resp.body)).phys_offset

            def back(group):
                return RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext={
                    "group": group, "offset": str(phys), "delayLevel": "-1",
                    "originMsgId": "X", "originTopic": "ProxyDead",
                    "maxReconsumeTimes": "0"}, language="JAVA")
            stranger = await client.invoke(d.broker, back("never-popped"), 5)
            assert stranger.code == ResponseCode.NO_PERMISSION, stranger
            r = await client.invoke(d.broker, back(GROUP), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await client.invoke(d.broker, ack_request(
                RequestCode.ACK_MESSAGE, "ProxyDead", extra, off), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
        finally:
            await client.close()
        dead = await read_all(d.namesrv, topic=f"%DLQ%{GROUP}")
        assert [b for q in dead.values() for b in q] == [b"poison"]
    asyncio.run(main())
