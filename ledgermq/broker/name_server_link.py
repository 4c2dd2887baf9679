"""The broker and its name servers: registration (again every registerNameServerPeriod
and whenever the role or the topics change), unregistration, and what a slave copies from
its master (RocketMQ's SlaveSynchronize: topic configs and consumer offsets)."""
from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, cast

from ..remoting import (
    Connection, RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode,
)
from ..remoting.signing import signer
from .meta.subgroups import SubscriptionGroupConfig
from .meta.topic_table import TopicConfig

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

# a name server the last registration did not reach, or whose connection closed since, is
# tried again this often (not only every registerNameServerPeriod): one that restarted
# knows nothing until the brokers register again
NAMESRV_RETRY_S = 1.0

# marks a change a master hands its group (one who takes it hands it no further; a
# follower takes it where only the master would only from a peer: handed_by_peer)
HANDED_BY_MASTER = "handedByMaster"
HAND_TIMEOUT_S = 2.0  # a broker that does not answer by then copies it on its next sync


def json_body(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class NameServerLink:
    def __init__(self, broker: "Broker"):
        self.broker = broker
        self.config = broker.config
        creds = (self.config.accessKey, self.config.secretKey)
        self.client = RemotingClient(signer=signer(*creds) if all(creds) else None,
                                     ssl_context=broker.config.tls.client)
        # hands changes to the group's brokers, proving the cluster secret where one is set
        self.peer_client = RemotingClient(signer=self.client.signer,
                                          ssl_context=broker.config.tls.client,
                                          authenticate=broker.peer_gate.authenticate)
        self.learned_ha_master = ""  # the master's HA address, as the name server says
        self._announcing: set[asyncio.Task[None]] = set()
        self.unreached: set[str] = set()  # name servers the last registration missed

    @property
    def namesrvs(self) -> list[str]:
        return [a.strip() for a in self.config.namesrvAddr.split(";") if a.strip()]

    def _identity(self) -> dict[str, str]:
        b = self.broker
        return {"brokerAddr": b.address, "brokerName": self.config.brokerName,
                "clusterName": self.config.brokerClusterName,
                "brokerId": str(b.mode.broker_id)}

    async def register(self) -> None:
        b = self.broker
        if b.mode.broker_id is None:
            return  # no role yet: clients should not see this broker
        wrapper = b.topics.table.to_json()
        wrapper["dataVersion"] = {**wrapper["dataVersion"], "stateVersion": b.mode.state_version}
        body = {"topicConfigSerializeWrapper": wrapper, "filterServerList": []}
        ext = {**self._identity(), "compressed": "false",
               "haServerAddr": f"{self.config.brokerIP1}:{b.mode.ha_port}"}
        if b.grpc_port:
            ext["grpcServerAddr"] = f"{self.config.brokerIP1}:{b.grpc_port}"
        # with every name server at once: one that hangs does not hold up the others (the
        # first inline: a consumer whose heartbeat just created its retry topic looks up
        # its route at once, and finds it when this request went out first)
        data = json_body(body)
        others = [asyncio.ensure_future(self._register_with(addr, ext, data))
                  for addr in self.namesrvs[1:]]
        if self.namesrvs:
            await self._register_with(self.namesrvs[0], ext, data)
        await asyncio.gather(*others)

    async def _register_with(self, addr: str, ext: dict[str, str], body: bytes) -> None:
        try:
            r = await self.client.invoke(addr, RemotingCommand(
                RequestCode.REGISTER_BROKER, ext=ext, body=body), 3.0)
        except RemotingError as e:
            if addr not in self.unreached:
                log.warning("cannot register with name server %s: %s", addr, e)
            self.unreached.add(addr)
            return
        self.unreached.discard(addr)
        conn = self.client.open_connection(addr)
        if conn is not None and not conn.attrs.get("watched"):  # it dies: register again
            conn.attrs["watched"] = True
            conn.closed.add_done_callback(lambda _: self.unreached.add(addr))
        if r.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused registration: %s", addr, r.remark)
        elif r.ext.get("haServerAddr"):
            self.learned_ha_master = r.ext["haServerAddr"]

    def announce(self) -> None:
        """Register soon (topics changed), from synchronous code."""
        task = asyncio.get_running_loop().create_task(self.register())
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    async def announced(self, timeout_s: float = 2.0) -> None:
        """Until every registration announced so far is done, or `timeout_s` (a hung name
        server): an admin's topic change is answered once the name servers route it, as
        RocketMQ registers before it answers."""
        if self._announcing:
            await asyncio.wait(list(self._announcing), timeout=timeout_s)

    async def unregister(self) -> None:
        for addr in self.namesrvs:
            try:
                await self.client.invoke(addr, RemotingCommand(
                    RequestCode.UNREGISTER_BROKER, ext=self._identity()), 1.0)
            except RemotingError:
                pass

    async def reregister(self) -> None:
        """After a role change: the route names the new role at once (a name server moves
        an address to the id it registers with), or drops this broker while it has none.
        Unregistering first would leave a moment in which its group has no route at all,
        and a client fetching it then takes the group for one that does not serve the
        topic, until its next refresh (30 s)."""
        if self.broker.mode.broker_id is None:
            await self.unregister()
        else:
            await self.register()

    async def master_ha_address(self) -> str | None:
        if not self.learned_ha_master:
            await self.register()
        return self.learned_ha_master or None

    async def register_loop(self) -> None:
        """Register every registerNameServerPeriod, and sooner while a name server was
        missed (so one that comes back learns this broker within a second or so)."""
        period = self.config.registerNameServerPeriod / 1000
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(min(period, NAMESRV_RETRY_S))
            if loop.time() - last >= period or self.unreached:
                last = loop.time()
                await self.register()

    async def close(self) -> None:
        for t in list(self._announcing):
            t.cancel()
        await self.client.close()
        await self.peer_client.close()

    # ---- what a slave copies from its master ------------------------------------------
    async def sync_loop(self) -> None:
        """Followers copy the master's topic configs and consumer offsets, so a new master
        knows the topics and the groups' progress."""
        while True:
            await asyncio.sleep(self.config.slaveSyncInterval / 1000)
            if not self.broker.mode.is_slave:
                continue
            try:
                await self.sync_from_master()
            except (RemotingError, ValueError, KeyError) as e:
                log.debug("sync from master failed: %s", e)

    async def _group_at(self, ns: str) -> dict[str, str]:
        """This group's brokers by id ("0": the master) as name server `ns` knows them;
        empty when it does not answer."""
        try:
            r = await self.client.invoke(ns, RemotingCommand(
                RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
        except RemotingError as e:
            log.debug("name server %s: %s", ns, e)
            return {}
        if r.code != ResponseCode.SUCCESS:
            return {}
        table = json.loads(cast(bytes, r.body))["brokerAddrTable"]
        return cast(dict[str, str], table.get(self.config.brokerName, {}).get("brokerAddrs", {}))

    async def master_address(self) -> str | None:
        """The group's master as the first name server that knows it says (a dead name
        server, or one just restarted that knows no master yet, is passed over)."""
        for ns in self.namesrvs:
            if master := (await self._group_at(ns)).get("0"):
                return master
        return None

    async def sync_from_master(self) -> None:
        master = await self.master_address()
        if not master or master == self.broker.address:
            return
        topics, offsets = self.broker.topics.table, self.broker.offsets
        r = await self.client.invoke(master, RemotingCommand(
            RequestCode.GET_ALL_TOPIC_CONFIG), 3.0)
        if r.code == ResponseCode.SUCCESS:
            for name, tc in json.loads(cast(bytes, r.body))["topicConfigTable"].items():
                theirs = TopicConfig(**{k: v for k, v in tc.items()
                                        if k in TopicConfig.__dataclass_fields__})
                if topics.get(name) != theirs:
                    topics.put(theirs)
        r = await self.client.invoke(master, RemotingCommand(
            RequestCode.GET_ALL_CONSUMER_OFFSET), 3.0)
        if r.code == ResponseCode.SUCCESS:
            for key, queues in json.loads(cast(bytes, r.body))["offsetTable"].items():
                topic, group = key.split("@", 1)
                for qid, off in queues.items():  # the master's, also when reset back
                    if int(off) != offsets.query(topic, group, int(qid)):
                        offsets.commit(topic, group, int(qid), int(off))
        r = await self.client.invoke(master, RemotingCommand(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 3.0)
        if r.code == ResponseCode.SUCCESS:
            self.broker.subgroups.replace_all({
                n: SubscriptionGroupConfig.from_json(c)
                for n, c in json.loads(cast(bytes, r.body))["subscriptionGroupTable"].items()})

    # ---- what a master hands its group ------------------------------------------------
    async def hand_to_group(self, code: int, ext: dict[str, str], body: bytes = b"") -> None:
        """An operator's topic or subscription group change, made on the master, handed to
        the group's other brokers before it is answered: one that becomes master within
        slaveSyncInterval of the change keeps it as made (CI saw a DLedger follower made
        leader right after a topic's creation route its 4 queues as 1, as its log showed).
        Best effort: a broker that does not take it copies it on its next sync."""
        groups = await asyncio.gather(*(self._group_at(ns) for ns in self.namesrvs))
        others = {a for g in groups for a in g.values()} - {self.broker.address}

        async def hand(addr: str) -> None:
            try:
                r = await self.peer_client.invoke(addr, RemotingCommand(
                    code, ext={**ext, HANDED_BY_MASTER: "true"}, body=body), HAND_TIMEOUT_S)
                if r.code != ResponseCode.SUCCESS:
                    log.warning("%s refused the change handed to it: %s", addr, r.remark)
            except RemotingError as e:
                log.warning("%s did not take the change handed to it (%s): it copies "
                            "it on its next sync", addr, e)
        await asyncio.gather(*(hand(a) for a in sorted(others)))


def handed_by_peer(broker: "Broker", cmd: RemotingCommand, conn: Connection) -> bool:
    """`cmd` is a change handed over by a server of the cluster: marked so, on a
    connection that proved the cluster secret (where one is set)."""
    return HANDED_BY_MASTER in cmd.ext and broker.peer_gate.is_peer(conn)
