"""A push consumer makes itself known to a broker its route names anew (in process: a name
server and real brokers), so that broker can reach it at once: a broker that becomes its
group's master tells the consumers it knows (docs/replication.md)."""
import asyncio

from ledgermq import Message, Producer, PushConsumer
from ledgermq.broker import Broker, load_broker_config
from ledgermq.broker.meta.topic_table import TopicConfig
from ledgermq.localcluster.cluster import free_ports
from ledgermq.namesrv import NamesrvConfig, NameServer

from ..wait import until


def _broker(tmp_path, namesrv: str, name: str) -> Broker:
    bcfg, scfg, _ = load_broker_config(None, {
        "namesrvAddr": namesrv, "listenPort": "0", "brokerName": name,
        "storePathRootDir": str(tmp_path / name), "mappedFileSizeCommitLog": str(1 << 20)})
    return Broker(bcfg, scfg)


def test_a_broker_new_in_the_route_hears_the_consumer_before_its_next_heartbeat(tmp_path):
    """A consumer heartbeats every broker of its routes every 30 s. broker-b came into the
    route after the consumer started (a slave that joined, a broker restarted): it did not
    know the consumer for up to 30 s, and as a new master could not tell it to move (the
    chaos runs: a paused master's consumers read nothing for 6.8 s, their long polls'
    timeout). Now the consumer heartbeats a broker new in its route at its next refresh."""
    async def go():
        ns = NameServer(NamesrvConfig(listenPort=free_ports(1)[0]))
        await ns.start()
        a, b = _broker(tmp_path, ns.address, "broker-a"), _broker(tmp_path, ns.address, "broker-b")
        c = PushConsumer("hb-group", ns.address, rebalance_interval=0.5)
        try:
            await a.start()
            async with Producer("hb-p", ns.address) as p:
                await p.send(Message("HB", b"x"))  # the topic, on broker-a
            c.subscribe("HB")
            c.register_listener(lambda msgs: None)
            await c.start()
            await until(lambda: "hb-group" in a.consumers.groups, "broker-a knows the consumer")
            await b.start()
            b.topics.create(TopicConfig("HB", 4, 4))
            b.namesrv.announce()  # broker-b serves HB now: the route names it
            await until(lambda: "hb-group" in b.consumers.groups,
                        "broker-b knows the consumer", timeout=5)
        finally:
            await c.shutdown()
            await b.stop()
            await a.stop()
            await ns.stop()
    asyncio.run(go())
