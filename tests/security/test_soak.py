"""Soak (#31, `make soak`, left out of the default run): 1,000 connections of a hostile
client, each repeating the attacks of tests/security for SOAK_SECONDS (60 s), while a real
client sends and consumes. The broker's RSS stays within SOAK_RSS_MB of where it began,
and the real client loses nothing it was acknowledged."""
import asyncio
import json
import multiprocessing
import os
import random
import time

import pytest

from ledgermq import Message, Producer
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode
from ledgermq.remoting.codes import PULL_FLAG_SUSPEND
from ledgermq.wire.message import encode_properties

from ..dev_process import DevProcess
from ..integration.load import read_all

SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
CONNECTIONS = int(os.environ.get("SOAK_CONNECTIONS", "1000"))
RSS_MB = int(os.environ.get("SOAK_RSS_MB", "400"))


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def send(topic, props, queue_id=0, body=b"x"):
    return RemotingCommand(RequestCode.SEND_MESSAGE, ext={
        "producerGroup": "hostile", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": "0",
        "bornTimestamp": "0", "flag": "0", "properties": encode_properties(props).decode(),
        "reconsumeTimes": "0"}, body=body)


def attacks(rng: random.Random, n: int) -> list[RemotingCommand]:
    """One round of a hostile connection: every attack the security tests name."""
    name = f"h{rng.getrandbits(40):x}"
    beat = json.dumps({"clientID": name, "producerDataSet": [], "consumerDataSet": [{
        "groupName": f"g-{name}", "messageModel": "CLUSTERING",
        "subscriptionDataSet": [{"topic": "Real", "subString": "*"}]}]}).encode()
    return [
        send("SCHEDULE_TOPIC_XXXX", {"REAL_TOPIC": "Real", "REAL_QID": "1000000",
                                      "DELAY": "1"}),
        send("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC": "Real"}),
        send("Real", {"REAL_QID": "999999", "TIMER_OUT_MS": "1"}),
        send(f"Invented{name}", {}),  # auto-creation, past its limit
        RemotingCommand(RequestCode.HEART_BEAT, body=beat),
        RemotingCommand(RequestCode.HEART_BEAT, body=b'{"consumerDataSet": [null]}'),
        RemotingCommand(RequestCode.PULL_MESSAGE, ext={
            "consumerGroup": f"g-{name}", "topic": "Real", "queueId": "0",
            "queueOffset": str(1 << 40), "maxMsgNums": "32", "sysFlag": str(PULL_FLAG_SUSPEND),
            "commitOffset": "0", "suspendTimeoutMillis": str(10 ** 9), "subscription": "*",
            "subVersion": "0"}),
        RemotingCommand(RequestCode.LOCK_BATCH_MQ, body=json.dumps({
            "consumerGroup": f"g-{name}", "clientId": name, "mqSet": [
                {"topic": f"T{i}", "brokerName": "x", "queueId": i} for i in range(50)]}).encode()),
        RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext={"offset": str(rng.getrandbits(40))}),
        RemotingCommand(RequestCode.END_TRANSACTION, ext={
            "producerGroup": "thief", "commitLogOffset": str(rng.getrandbits(20)),
            "commitOrRollback": "8", "tranStateTableOffset": "0"}),
    ]


async def hostile(broker: str, until: float, seed: int, stats: dict) -> None:
    rng = random.Random(seed)
    client = RemotingClient()
    try:
        while time.monotonic() < until:
            for cmd in attacks(rng, seed):
                try:  # answers are not waited for beyond a moment: a hostile client
                    await client.invoke(broker, cmd, 2)
                    stats["answered"] += 1
                except Exception:
                    stats["unanswered"] += 1
                if time.monotonic() >= until:
                    break
            await asyncio.sleep(rng.uniform(0.5, 1.5))
    finally:
        await client.close()


def hostile_process(broker: str, seconds: float, connections: int, out) -> None:
    """The hostile client in a process of its own (its event loop is not the real
    client's): every connection's attacks; the answered/unanswered counts to `out`."""
    async def run():
        until = time.monotonic() + seconds
        stats = {"answered": 0, "unanswered": 0}
        await asyncio.gather(*(hostile(broker, until, i, stats) for i in range(connections)),
                             return_exceptions=True)
        return stats
    out.put(asyncio.run(run()))


async def real_client(namesrv: str, until: float) -> list:
    acked = []
    async with Producer("real", namesrv, send_timeout=10) as p:
        while time.monotonic() < until:
            try:
                r = await p.send(Message("Real", b"real-%d" % len(acked)))
                acked.append((r.queue.queue_id, r.queue_offset, b"real-%d" % len(acked)))
            except Exception:
                pass  # a send the broker could not take in time is not acknowledged
            await asyncio.sleep(0.02)
    return acked


@pytest.mark.slow
def test_a_thousand_hostile_connections_do_not_grow_the_broker_or_cost_the_real_client(
        tmp_path):
    d = DevProcess(tmp_path / "dev", {"maxInFlightRequestsPerConnection": "64"}).start()
    try:
        async def scenario():
            async with Producer("warm", d.namesrv) as p:
                await p.send(Message("Real", b"warm-up"))
            base = rss_mb(d.proc.pid)
            until = time.monotonic() + SECONDS
            peak = [base]

            async def watch():
                while time.monotonic() < until + 5:
                    peak[0] = max(peak[0], rss_mb(d.proc.pid))
                    await asyncio.sleep(1)
            watcher = asyncio.ensure_future(watch())
            acked = await real_client(d.namesrv, until)
            await watcher
            return base, peak[0], acked
        results = multiprocessing.Queue()
        attacker = multiprocessing.Process(target=hostile_process,
                                           args=(d.broker, SECONDS, CONNECTIONS, results))
        attacker.start()
        try:
            base, peak, acked = asyncio.run(scenario())
            stats = results.get(timeout=60)
        finally:
            attacker.join(30)
            if attacker.is_alive():
                attacker.kill()

        stored = {(qid, body) for qid, bodies in
                  asyncio.run(read_all(d.namesrv, topic="Real")).items() for body in bodies}
    finally:
        d.stop()
    print(f"soak: {CONNECTIONS} hostile connections for {SECONDS:.0f} s, {stats}; broker RSS "
          f"{base:.0f} MB -> peak {peak:.0f} MB; real client acknowledged {len(acked)}")
    assert len(acked) > SECONDS * 5, "the real client could hardly send"
    lost = [a for a in acked if (a[0], a[2]) not in stored]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:3]}"
    assert peak - base < RSS_MB, f"broker RSS grew {peak - base:.0f} MB"
