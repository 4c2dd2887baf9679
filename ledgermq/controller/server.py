"""The controller process (S1-1): a ControllerNode driven over real sockets and files.

One port per controller node (its controllerDLegerPeers address) carries both the Raft
messages between controllers and the requests of brokers and operators. Only the Raft
leader answers requests that read or change metadata; the others say
CONTROLLER_NOT_LEADER and the caller tries the next address. Metadata is rebuilt on start
by re-applying the committed log.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path

from ..drivers.raft import RAFT_MESSAGE, FileRaftLog, RaftDriver, RaftMeta
from ..metrics.serving import gauge, serve as serve_metrics
from ..peer_auth.core import PeerAuth
from ..remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ..replication.raft import RaftConfig
from ..runtime.clock import mono_ms
from ..runtime.files import DirectoryLock
from .config import ControllerConfig
from .liveness import LOWEST_PRIORITY, BrokerReport
from .metadata import AlterSyncStateSet, CleanBrokerMetadata, ElectMaster, RegisterBroker, Result
from .metrics import group_families
from .node import Answer, Applied, ControllerNode

log = logging.getLogger(__name__)

PROPOSE_TIMEOUT_S = 5.0
# what changes metadata or liveness: only from peers that proved the cluster secret
# (reads stay open, as the admin tools and the console ask them)
AUTHENTICATED_CODES = frozenset({
    RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.BROKER_HEARTBEAT,
    RequestCode.CONTROLLER_ELECT_MASTER, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
    RequestCode.CLEAN_BROKER_DATA})


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(",", ";").split(";") if x.strip())


class ControllerServer(RaftDriver):
    LINK = "controller"

    def __init__(self, config: ControllerConfig):
        self.config = config
        directory = Path(config.controllerStorePath)
        self._dir_lock = DirectoryLock(directory, "controller store")
        self._dir_lock.acquire()  # one controller per log
        super().__init__(config.controllerDLegerSelfId, config.peers, RaftMeta(directory),
                         FileRaftLog(directory / "log"), PeerAuth(config.cluster_secret),
                         tls=config.tls)
        self.core = self._new_core()
        self.raft = self.core.raft
        self.metrics_server: asyncio.Server | None = None
        self._handlers = {
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register,
            RequestCode.BROKER_HEARTBEAT: self._heartbeat,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._sync_state_data,
            RequestCode.CLEAN_BROKER_DATA: self._clean,
        }

    def _new_core(self) -> ControllerNode:
        """The controller's state machine over this log: it applies the log up to the
        saved commit index again (metadata lives in memory)."""
        c = self.config
        return ControllerNode(
            self.self_id, list(self.peers),
            RaftConfig(election_timeout_ms=c.electionTimeoutMs,
                       heartbeat_ms=c.heartbeatIntervalMs),
            log=self.log, term=self.meta.term, voted_for=self.meta.voted_for,
            commit=self.meta.commit, now=mono_ms(),
            heartbeat_timeout_ms=c.brokerNotActiveTimeoutMillis,
            unclean=c.enableElectUncleanMaster)

    def _reopen(self) -> None:
        """(RaftDriver.persist_failed) the log, term, vote and metadata as a restart reads
        them; the brokers' heartbeats, kept in memory only, come again."""
        directory = Path(self.config.controllerStorePath)
        fresh, meta = FileRaftLog(directory / "log"), RaftMeta(directory)
        self._close_quietly(self.log)
        self.log, self.meta = fresh, meta
        self.core = self._new_core()
        self.raft = self.core.raft

    @property
    def address(self) -> str:
        return self.peers[self.self_id]

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        if self.config.enableElectUncleanMaster:
            log.warning("UNSAFE CONFIGURATION, this controller gives up the promise that no "
                        "acknowledged message is lost when a broker dies: "
                        "enableElectUncleanMaster=true lets a broker outside the SyncStateSet "
                        "become master, without what the set acknowledged")
        await super().start()
        if self.config.metricsPort:
            from prometheus_client import CollectorRegistry
            reg = CollectorRegistry(auto_describe=False)
            reg.register(_Collector(self))
            host = self.address.rsplit(":", 1)[0]
            self.metrics_server = await serve_metrics(reg, host, self.config.metricsPort)

    async def stop(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.close()
        await super().stop()
        self._dir_lock.release()

    # ---- requests -------------------------------------------------------------------
    def _on_request(self, cmd: RemotingCommand, conn: Connection):
        if cmd.code == RAFT_MESSAGE:
            return super()._on_request(cmd, conn)
        return self.handle(cmd, conn)

    def handle(self, cmd: RemotingCommand, conn: Connection):
        """A broker's or operator's request (also reached through the name server when the
        controller is embedded in it: the name server's connection then)."""
        screened = self.gate.screen(cmd, conn, AUTHENTICATED_CODES)
        if screened is not None:
            return screened
        if cmd.code == RequestCode.CONTROLLER_GET_METADATA_INFO:
            m = self.metadata_info()
            # (RocketMQ's tools read GetMetaDataResponseHeader: the leader they ask next)
            header = {"group": m["group"], "controllerLeaderId": m["leaderId"] or "",
                      "controllerLeaderAddress": m["leaderAddress"] or "",
                      "isLeader": str(m["isLeader"]).lower(),
                      "peers": ";".join(f"{k}-{v}" for k, v in sorted(m["peers"].items()))}
            return cmd.response(ResponseCode.SUCCESS, ext=header, body=_json(m))
        if cmd.code == RequestCode.GET_CONTROLLER_CONFIG:
            shown = dataclasses.asdict(self.config)
            if shown["clusterSecret"]:
                shown["clusterSecret"] = "(hidden)"  # readable by anyone who can connect
            return cmd.response(ResponseCode.SUCCESS, body=_json(shown))
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                f"the controller does not serve request code {cmd.code}")
        if not self.is_leader:
            return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER,
                                f"controller {self.self_id} is not the leader "
                                f"(leader: {self.raft.leader})")
        try:
            return handler(cmd)
        except (KeyError, ValueError, TypeError) as e:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                f"bad request: {type(e).__name__}: {e}")

    def _register(self, cmd):
        e = cmd.ext
        c = RegisterBroker(e["clusterName"], e["brokerName"], e["brokerAddress"],
                           e.get("haAddress", ""))
        return self._answer(cmd, self.propose(c), heard=e["brokerName"])

    def _heartbeat(self, cmd):
        e = cmd.ext
        group, bid = e["brokerName"], int(e["brokerId"])
        report = None
        if "maxOffset" in e:  # RocketMQ's BrokerHeartbeatRequestHeader fields
            report = BrokerReport(int(e.get("epoch", -1)), int(e["maxOffset"]),
                                  int(e.get("confirmOffset", -1)),
                                  int(e.get("electionPriority", LOWEST_PRIORITY)))
        self.core.broker_heartbeat(group, bid, mono_ms(), report)
        return self._replica_info(cmd)

    def _elect(self, cmd):
        e = cmd.ext
        group = e["brokerName"]
        preferred = int(e["brokerId"]) if e.get("brokerId", "") not in ("", "-1") else None
        operator = e.get("operator", "false") == "true"
        c = ElectMaster(group, self.alive(group), preferred=preferred,
                        unclean=self.config.enableElectUncleanMaster, operator=operator)
        return self._answer(cmd, self.propose(c))

    def _alter(self, cmd):
        e = cmd.ext
        c = AlterSyncStateSet(e["brokerName"], int(e["masterId"]), int(e["masterEpoch"]),
                              tuple(json.loads(cmd.body)), int(e["syncStateSetEpoch"]))
        return self._answer(cmd, self.propose(c))

    def _clean(self, cmd):
        c = CleanBrokerMetadata(cmd.ext["brokerName"], _ids(cmd.ext.get("brokerIds", "")))
        return self._answer(cmd, self.propose(c))

    def _replica_info(self, cmd):
        g = self.core.metadata.groups.get(cmd.ext["brokerName"])
        if g is None:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                f"broker group {cmd.ext['brokerName']} is not registered")
        return cmd.response(ResponseCode.SUCCESS, body=_json(g.view()))

    def _sync_state_data(self, cmd):
        names = json.loads(cmd.body) if cmd.body else []
        groups = self.core.metadata.groups
        missing = [n for n in names if n not in groups]
        if missing:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                f"broker groups {missing} are not registered")
        now = mono_ms()
        out = {}
        for name in names or sorted(groups):
            v = groups[name].view()
            v["alive"] = [b for b in sorted(groups[name].brokers)
                          if now - self.core.heard.get((name, b), -1 << 60)
                          < self.config.brokerNotActiveTimeoutMillis]
            # what elections go by (the leader's memory): each live broker's last report
            v["liveness"] = {str(b): r.view() for b in v["alive"]
                             if (r := self.core.reports.get((name, b))) is not None}
            out[name] = v
        if cmd.language == "JAVA":  # RocketMQ's tools read BrokerReplicasInfo
            out = {"replicasInfoTable": {name: replicas_info(v) for name, v in out.items()}}
        return cmd.response(ResponseCode.SUCCESS, body=_json(out))

    async def _answer(self, cmd, fut, heard: str | None = None):
        try:
            result: Result = await asyncio.wait_for(fut, PROPOSE_TIMEOUT_S)
        except asyncio.TimeoutError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "the controller group did not "
                                "commit the command in time (no quorum?)")
        if heard and result.ok and "brokerId" in result.data:  # registering is a sign of life
            self.core.broker_heartbeat(heard, result.data["brokerId"], mono_ms())
        if not result.ok:
            code = ResponseCode.CONTROLLER_NOT_LEADER if result.error in (
                "NOT_LEADER", "TERM_CHANGED") else ResponseCode.CONTROLLER_INVALID_REQUEST
            return cmd.response(code, result.error)
        return cmd.response(ResponseCode.SUCCESS, result.error or None, body=_json(result.data))

    # ---- proposing --------------------------------------------------------------------
    def alive(self, group: str) -> tuple[int, ...]:
        """The brokers heard lately, the one to elect first (ElectMaster carries the order)."""
        return self.core.candidates(group, mono_ms())

    def propose(self, command) -> asyncio.Future:
        rid = self.next_request_id()
        fut = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        self.execute(self.core.propose(rid, command, mono_ms()))
        return fut

    def other(self, action) -> None:
        if isinstance(action, Answer):
            fut = self.waiters.pop(action.request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(action.result)
        elif isinstance(action, Applied) and isinstance(action.command, ElectMaster) \
                and action.result.ok and "previousMaster" in action.result.data:
            d = action.result.data
            if d["masterBrokerId"] != d["previousMaster"] or action.command.operator:
                (log.error if d.get("unclean") else log.info)(
                    "%s: broker %s elected master of %s in epoch %d%s", self.self_id,
                    d["masterBrokerId"], d["group"], d["masterEpoch"],
                    " OUTSIDE the SyncStateSet: acknowledged messages may be lost"
                    if d.get("unclean") else "")

    def metadata_info(self) -> dict:
        r = self.raft
        return {"controllerId": self.self_id, "group": self.config.controllerDLegerGroup,
                "peers": self.peers, "leaderId": r.leader,
                "leaderAddress": self.peers.get(r.leader) if r.leader else None,
                "isLeader": self.is_leader, "role": r.role.value, "term": r.term,
                "commitIndex": r.commit, "appliedIndex": self.core.applied}


def replicas_info(view: dict) -> dict:
    """One group's SyncStateSet as RocketMQ's ReplicasInfo."""
    def replica(b: str) -> dict:
        return {"brokerName": view["group"], "brokerId": int(b),
                "brokerAddress": view["brokers"][b], "alive": int(b) in view["alive"]}
    in_set = {str(b) for b in view["syncStateSet"]}
    return {"masterBrokerId": view["masterBrokerId"], "masterAddress": view["masterAddress"],
            "masterEpoch": view["masterEpoch"], "syncStateSetEpoch": view["syncStateSetEpoch"],
            "inSyncReplicas": [replica(b) for b in view["brokers"] if b in in_set],
            "notInSyncReplicas": [replica(b) for b in view["brokers"] if b not in in_set]}


class _Collector:
    """The controller node's figures for Prometheus, read at scrape time."""

    def __init__(self, server: ControllerServer):
        self.server = server

    def collect(self):
        m, labels = self.server.metadata_info(), ["controller_id"]
        me = [str(m["controllerId"])]
        yield gauge("ledgermq_controller_is_leader", "1 on the controller group's leader.",
                    labels, me, float(m["isLeader"]))
        yield gauge("ledgermq_controller_term", "Raft term of the controller group.", labels,
                    me, m["term"])
        yield gauge("ledgermq_controller_commit_index", "Committed index of the metadata log.",
                    labels, me, m["commitIndex"])
        yield gauge("ledgermq_controller_broker_groups", "Broker groups the metadata knows.",
                    labels, me, len(self.server.core.metadata.groups))
        yield from group_families(self.server.core.metadata.groups, labels, me)


def _json(obj) -> bytes:
    return json.dumps(obj).encode()
