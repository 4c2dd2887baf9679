"""Consumer offsets belong to the group's master: a pull that carries a commit offset
commits it only there (RocketMQ's PullMessageProcessor stores it only when the broker is
not a slave). A DLedger follower whose brokerRole key still says ASYNC_MASTER once
committed it, so a follower's offsets could run ahead of the master's."""
import asyncio

from ledgermq.cluster import down, status, up
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

from .test_dledger import leader_of

PULL_FLAG_COMMIT_OFFSET = 0x1  # the wire value, as a RocketMQ client sends it


async def invoke(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    c = RemotingClient()
    try:
        return await c.invoke(addr, cmd, 5.0)
    finally:
        await c.close()


async def pull_committing(addr: str, group: str, commit: int) -> RemotingCommand:
    return await invoke(addr, RemotingCommand(RequestCode.PULL_MESSAGE, ext={
            "consumerGroup": group, "topic": "TBW102", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "1", "sysFlag": str(PULL_FLAG_COMMIT_OFFSET),
            "commitOffset": str(commit), "suspendTimeoutMillis": "0"}))


async def committed(addr: str, group: str) -> RemotingCommand:
    return await invoke(addr, RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext={
        "consumerGroup": group, "topic": "TBW102", "queueId": "0"}))


def test_a_dledger_follower_does_not_commit_offsets_from_pulls(tmp_path):
    d = tmp_path / "g"
    up("dledger", 3, d)
    try:
        leader = leader_of(d)
        follower = next(p for p in status(d)["processes"]
                        if p.get("role") == "FOLLOWER" and p["alive"])
        f_addr = f"127.0.0.1:{follower['port']}"
        l_addr = f"127.0.0.1:{leader['port']}"
        asyncio.run(pull_committing(f_addr, "g-follower", 7))
        asyncio.run(pull_committing(l_addr, "g-leader", 5))
        r = asyncio.run(committed(f_addr, "g-follower"))
        assert r.code != ResponseCode.SUCCESS or r.ext["offset"] != "7", \
            "the follower committed a consumer offset"
        r = asyncio.run(committed(l_addr, "g-leader"))
        assert (r.code, r.ext.get("offset")) == (ResponseCode.SUCCESS, "5")  # the master does
    finally:
        down(d)
