"""bench/request_floor.py, the floor under one message per request: its name server routes
the benchmark topic to it, and it answers every SEND with the SEND_OK fields RocketMQ's
clients read (a floor that answered wrongly would measure clients failing, not a floor)."""
import asyncio
import json

from bench.request_floor import TOPIC, FloorSide
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.remoting.command import SerializeType


def test_the_floor_is_routed_and_answers_sends_of_either_header_with_send_ok(tmp_path):
    floor = FloorSide("single", tmp_path)

    async def main():
        client = RemotingClient()
        try:
            route = await client.invoke(floor.namesrv, RemotingCommand(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": TOPIC}), 3.0)
            assert route.code == ResponseCode.SUCCESS
            broker = json.loads(route.body)["brokerDatas"][0]["brokerAddrs"]["0"]
            offsets = []
            for stype in (SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.JSON):
                r = await client.invoke(broker, RemotingCommand(
                    RequestCode.SEND_MESSAGE_V2, ext={"b": TOPIC, "e": "0"}, body=b"x" * 100,
                    serialize_type=stype), 3.0)
                assert r.code == ResponseCode.SUCCESS
                assert len(r.ext["msgId"]) == 32 and r.ext["queueId"] == "0"
                offsets.append(int(r.ext["queueOffset"]))
            assert offsets == sorted(offsets) and len(set(offsets)) == 3
            beat = await client.invoke(broker, RemotingCommand(RequestCode.HEART_BEAT), 3.0)
            assert beat.code == ResponseCode.SUCCESS and not beat.ext
        finally:
            await client.close()
    try:
        asyncio.run(main())
    finally:
        floor.close()
    assert floor.proc.returncode == 0
