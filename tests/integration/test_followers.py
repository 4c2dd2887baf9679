"""A follower stays a copy of its master. Consumer offsets belong to the master: a pull
that carries a commit offset commits it only there (RocketMQ's PullMessageProcessor stores
it only when the broker is not a slave); a DLedger follower, whose brokerRole key still
says ASYNC_MASTER, once committed it. A consumer's send-back (a message to retry) is a
write: a slave refuses it; a checkpoint-mode slave once appended it to its own log."""
import asyncio

from ledgermq import Message, Producer
from ledgermq.localcluster.cluster import down, status, up
from ledgermq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from ledgermq.wire.message import decode_offset_msg_id

from .test_checkpoint_mode import procs, wait_for_master, wait_slave_caught_up
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


async def send_one(namesrv: str) -> int:
    """The commit-log offset of a message sent through the group's master."""
    async with Producer("p-followers", namesrv) as p:
        r = await p.send(Message("Followed", b"retry me"))
    return decode_offset_msg_id(r.offset_msg_id)[2]


def test_a_checkpoint_slave_refuses_a_send_back(tmp_path):
    d = tmp_path / "g"
    state = up("checkpoint", 2, d)
    try:
        wait_for_master(d)
        offset = asyncio.run(send_one(state["namesrv"]))
        slave = next(p for p in procs(d).values() if p.get("role") == "SLAVE")
        end = wait_slave_caught_up(d, slave["name"])["ha"]["maxOffset"]
        r = asyncio.run(invoke(f"127.0.0.1:{slave['port']}", RemotingCommand(
            RequestCode.CONSUMER_SEND_MSG_BACK, ext={
                "group": "g-retry", "offset": str(offset), "delayLevel": "0",
                "originMsgId": "", "maxReconsumeTimes": "16"})))
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
        assert procs(d)[slave["name"]]["ha"]["maxOffset"] == end  # its log is untouched
    finally:
        down(d)
