"""Transactional messages on a real broker (`ledgermq dev`): a half message stays invisible
until committed, never appears when rolled back, is settled by the check-back with any
live producer of its group when its own producer left it open, goes to
TRANS_CHECK_MAX_TIME_TOPIC after transactionCheckMax checks, and keeps its state across a
restart (a decided one is not decided again)."""
import asyncio
import time

from ledgermq import LocalTransactionState, Message, TransactionProducer

from ..wait import until
from .load import read_all as read_queues

COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE,
                            LocalTransactionState.ROLLBACK_MESSAGE, LocalTransactionState.UNKNOW)
FAST_CHECKS = {"transactionTimeOut": "400", "transactionCheckInterval": "200"}


async def read_all(namesrv: str, topic: str) -> list[bytes]:
    """Every body stored in `topic`'s queues, read from the start by a fresh reader."""
    return [b for q in (await read_queues(namesrv, topic=topic)).values() for b in q]


def test_a_half_message_is_invisible_until_committed_and_gone_when_rolled_back(dev):
    d = dev()

    async def main():
        async with TransactionProducer("tx-group", d.namesrv) as p:
            seen_during = []

            async def local(msg, arg):  # the half message is stored: nobody may see it yet
                seen_during.append(await read_all(d.namesrv, "Orders"))
                return arg

            r, state = await p.send_in_transaction(Message("Orders", b"commit-me"), local, COMMIT)
            assert r.status.value == "SEND_OK" and state is COMMIT
            await p.send_in_transaction(Message("Orders", b"roll-me-back"), local, ROLLBACK)
            assert seen_during == [[], [b"commit-me"]]
            got = await until(lambda: read_all(d.namesrv, "Orders"), "the committed message")
            assert got == [b"commit-me"]
    asyncio.run(main())


def test_an_unknown_outcome_is_committed_by_the_check_back(dev):
    d = dev(FAST_CHECKS)

    async def main():
        checked, seen_in = [], []

        def check(half):
            checked.append(half.uniq_key)
            seen_in.append(half.topic)  # as sent (RocketMQ's), not the half topic
            return COMMIT
        async with TransactionProducer("tx-check", d.namesrv, check=check) as p:
            r, _ = await p.send_in_transaction(Message("Pay", b"later"), lambda m, a: UNKNOW)
            due = time.monotonic() + 0.4  # transactionTimeOut
            assert await read_all(d.namesrv, "Pay") == []
            await until(lambda: read_all(d.namesrv, "Pay"), "the check-back's commit",
                        timeout=15, interval=0.05)
            latency = time.monotonic() - due
            assert checked == [r.msg_id]  # asked once, about this transaction
            assert seen_in == ["Pay"]
            await asyncio.sleep(1.0)  # more check rounds pass: decided, not asked again
            assert checked == [r.msg_id] and await read_all(d.namesrv, "Pay") == [b"later"]
            print(f"check-back latency after the timeout: {latency * 1000:.0f} ms")
    asyncio.run(main())


def test_a_producer_gone_mid_transaction_is_answered_for_by_another_of_its_group(dev):
    d = dev(FAST_CHECKS)

    async def main():
        async with TransactionProducer("tx-crew", d.namesrv) as gone:
            await gone.send_in_transaction(Message("Crew", b"orphan"), lambda m, a: UNKNOW)
        async with TransactionProducer("tx-crew", d.namesrv, check=lambda h: COMMIT) as other:
            # its own transaction makes it known to the broker (heartbeats go where a
            # producer sends, as RocketMQ's do)
            await other.send_in_transaction(Message("Crew", b"mine"), lambda m, a: COMMIT)
            await until(lambda: _has(d.namesrv, "Crew", 2), "the orphan committed",
                        timeout=15, interval=0.1)
            assert sorted(await read_all(d.namesrv, "Crew")) == [b"mine", b"orphan"]
    asyncio.run(main())


def test_a_transaction_never_decided_is_discarded_after_the_most_checks(dev):
    d = dev({**FAST_CHECKS, "transactionCheckMax": "2"})

    async def main():
        asked = []
        async with TransactionProducer("tx-undecided", d.namesrv,
                                       check=lambda h: asked.append(1) or UNKNOW) as p:
            await p.send_in_transaction(Message("Limbo", b"never"), lambda m, a: UNKNOW)
            got = await until(lambda: read_all(d.namesrv, "TRANS_CHECK_MAX_TIME_TOPIC"),
                              "the discarded half message", timeout=20, interval=0.1)
            assert got == [b"never"] and len(asked) == 2
            assert await read_all(d.namesrv, "Limbo") == []
    asyncio.run(main())


def test_open_and_decided_transactions_survive_a_restart(dev, tmp_path):
    d = dev(FAST_CHECKS, data=tmp_path / "broker")
    ports = d.ports

    async def before():
        async with TransactionProducer("tx-restart", d.namesrv) as p:
            await p.send_in_transaction(Message("Ledger", b"decided"), lambda m, a: COMMIT)
            await p.send_in_transaction(Message("Ledger", b"open"), lambda m, a: UNKNOW)
            await until(lambda: read_all(d.namesrv, "Ledger"), "the committed one")
    asyncio.run(before())
    d.stop()
    d.start(*ports)

    async def after():
        async with TransactionProducer("tx-restart", d.namesrv,
                                       check=lambda h: COMMIT) as p:
            await p.send_in_transaction(Message("Ledger", b"new"), lambda m, a: ROLLBACK)
            await until(lambda: _has(d.namesrv, "Ledger", 2), "the open one committed",
                        timeout=15, interval=0.1)
            await asyncio.sleep(1.0)  # check rounds pass: nothing is committed twice
            assert sorted(await read_all(d.namesrv, "Ledger")) == [b"decided", b"open"]
    asyncio.run(after())


async def _has(namesrv: str, topic: str, n: int) -> bool:
    return len(await read_all(namesrv, topic)) >= n


def test_a_late_second_decision_changes_nothing(dev):
    """END_TRANSACTION again (a retried one-way, a check answered twice) for a transaction
    committed long ago, after the check-back moved past it: no second copy."""
    from ledgermq.remoting import RemotingCommand, RequestCode
    from ledgermq.wire.message import decode_offset_msg_id

    d = dev(FAST_CHECKS)

    async def main():
        async with TransactionProducer("tx-late", d.namesrv) as p:
            r, _ = await p.send_in_transaction(Message("Once", b"one"), lambda m, a: COMMIT)
            await until(lambda: read_all(d.namesrv, "Once"), "the commit")
            await asyncio.sleep(1.0)  # check rounds pass over the decided half message
            phys = decode_offset_msg_id(r.offset_msg_id)[2]
            resp = await p.instance.broker_request(d.broker, RemotingCommand(
                RequestCode.END_TRANSACTION, ext={
                    "producerGroup": "tx-late", "tranStateTableOffset": str(r.queue_offset),
                    "commitLogOffset": str(phys), "commitOrRollback": "8",
                    "fromTransactionCheck": "true", "msgId": r.msg_id,
                    "transactionId": r.msg_id}))
            assert "already decided" in resp.remark
            assert await read_all(d.namesrv, "Once") == [b"one"]
    asyncio.run(main())
