"""What producers and consumers share: name-server lookups, topic routes, broker requests
and heartbeats."""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, cast

from ..remoting import (
    Connection, RemotingClient, RemotingCommand, RemotingError, RequestCode, ResponseCode,
)
from ..remoting.codes import PERM_READ, PERM_WRITE
from ..remoting.signing import signer
from ..remoting.tls import client_context
from .message import MessageQueue

log = logging.getLogger(__name__)

MASTER_ID = 0
AUTO_CREATE_TOPIC = "TBW102"
REPORT_EVERY_S = 1.0  # a silent master is reported to its group's followers this often
REPORT_TIMEOUT_S = 1.0

# what serves the requests brokers send a client, and a client's `tls` argument
OnRequest = Callable[[RemotingCommand, Connection], "RemotingCommand | None"]
TlsOption = bool | ssl.SSLContext | None


class MQClientError(Exception):
    """A request the broker or name server answered with an error (code and remark kept)."""

    def __init__(self, code: int, remark: str | None):
        super().__init__(f"{ResponseCode(code).name if code in ResponseCode._value2member_map_ else code}: {remark}")
        self.code = code
        self.remark = remark


def env_signer() -> Callable[[RemotingCommand], None] | None:
    """ACL credentials from LEDGERMQ_ACCESS_KEY / LEDGERMQ_SECRET_KEY: every request this
    process's clients send is signed with them (a broker with aclEnable wants that)."""
    ak, sk = os.environ.get("LEDGERMQ_ACCESS_KEY"), os.environ.get("LEDGERMQ_SECRET_KEY")
    return signer(ak, sk) if ak and sk else None


def tls_context(tls: TlsOption) -> ssl.SSLContext | None:
    """A client's TLS (RocketMQ clients' tls.enable): an SSLContext as given; True: TLS,
    trusting the CA file LEDGERMQ_TLS_CA (else the system's CAs); False: plaintext; None:
    as LEDGERMQ_TLS says (true/false, default false)."""
    if tls is None:
        raw = os.environ.get("LEDGERMQ_TLS", "").strip().lower()
        if raw not in ("", "true", "false"):
            raise ValueError(f"LEDGERMQ_TLS={raw!r}: expected true or false")
        tls = raw == "true"
    if isinstance(tls, ssl.SSLContext):
        return tls
    if not tls:
        return None
    ca = os.environ.get("LEDGERMQ_TLS_CA") or None
    if ca and not os.path.isfile(ca):
        raise ValueError(f"LEDGERMQ_TLS_CA={ca!r}: no such file (the CA certificate, PEM)")
    return client_context(ca)


def loads_lenient(raw: bytes) -> Any:
    """JSON, also accepting fastjson's unquoted integer keys ({0:"addr"}) from Java servers."""
    try:
        return json.loads(raw)
    except ValueError:
        return json.loads(re.sub(rb'([{,])\s*(-?\d+)\s*:', rb'\1"\2":', raw))


@dataclass
class TopicRoute:
    topic: str
    queue_datas: list[dict[str, Any]]  # the name server's JSON
    broker_datas: list[dict[str, Any]]
    _write_queues: list[MessageQueue] | None = None
    fetched: float = field(default_factory=time.monotonic)  # when the name server said so
    doubted: bool = False  # a broker it names as master said it is not (a failover is on)

    def stale(self, age_s: float) -> bool:
        """Whether to ask for it again: a group had no master, or a master it names said it
        is not one, and it is older than `age_s`."""
        return (self.doubted or bool(self.masterless())) and \
            time.monotonic() - self.fetched > age_s

    def masterless(self) -> list[str]:
        """Groups with writable queues but no master in this route (mid-failover when it
        was fetched): their queues are left out of `write_queues`."""
        return [qd["brokerName"] for qd in self.queue_datas
                if qd["perm"] & PERM_WRITE and not self.broker_addr(qd["brokerName"])]

    def names(self, broker_name: str) -> bool:
        """Whether this route lists the group's brokers."""
        return any(bd["brokerName"] == broker_name for bd in self.broker_datas)

    def broker_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        for bd in self.broker_datas:
            if bd["brokerName"] == broker_name:
                addr: str | None = bd["brokerAddrs"].get(str(broker_id))
                return addr
        return None

    def read_addr(self, broker_name: str) -> str | None:
        """Where to read a broker's queues: its master, or a slave while it has none."""
        for bd in self.broker_datas:
            if bd["brokerName"] == broker_name and bd["brokerAddrs"]:
                addrs: dict[int, str] = {int(k): v for k, v in bd["brokerAddrs"].items()}
                return addrs.get(MASTER_ID) or addrs[min(addrs)]
        return None

    def brokers(self) -> dict[str, dict[int, str]]:
        return {bd["brokerName"]: {int(k): v for k, v in bd["brokerAddrs"].items()}
                for bd in self.broker_datas}

    def write_queues(self, topic: str | None = None) -> list[MessageQueue]:
        if topic is None:
            if self._write_queues is None:
                self._write_queues = self._compute_write_queues(None)
            return self._write_queues
        return self._compute_write_queues(topic)

    def _compute_write_queues(self, topic: str | None) -> list[MessageQueue]:
        out = []
        for qd in sorted(self.queue_datas, key=lambda q: q["brokerName"]):
            if qd["perm"] & PERM_WRITE and self.broker_addr(qd["brokerName"]):
                out += [MessageQueue(topic or self.topic, qd["brokerName"], i)
                        for i in range(qd["writeQueueNums"])]
        return out

    def read_queues(self) -> list[MessageQueue]:
        out = []
        for qd in sorted(self.queue_datas, key=lambda q: q["brokerName"]):
            if qd["perm"] & PERM_READ:
                out += [MessageQueue(self.topic, qd["brokerName"], i)
                        for i in range(qd["readQueueNums"])]
        return out


_INSTANCE_SEQ = itertools.count(1)


def default_client_id() -> str:
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    # unique per instance: two consumers of one group in one process are two members
    return f"{ip}@{os.getpid()}#{next(_INSTANCE_SEQ)}"


class ClientInstance:
    def __init__(self, namesrv: str, *, client_id: str | None = None,
                 request_timeout: float = 3.0,
                 on_request: OnRequest | None = None, tls: TlsOption = None):
        """`tls`: see tls_context (None: the LEDGERMQ_TLS environment variable)."""
        self.namesrvs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrvs:
            raise ValueError("no name server address given")
        self.client_id = client_id or default_client_id()
        self.request_timeout = request_timeout
        # a connection silent for a whole request timeout is dropped and made again: after
        # a partition heals, a new one gets through where the old waits on TCP's backoff
        self.remoting = RemotingClient(on_request or self._default_handler,
                                       signer=env_signer(), ssl_context=tls_context(tls),
                                       drop_silent=True)
        self.routes: dict[str, TopicRoute] = {}
        self._reported: dict[str, float] = {}  # group -> when its silent master was reported
        self._ns_index = 0

    @staticmethod
    def _default_handler(cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        if cmd.is_oneway:
            return None
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            f"this client does not serve code {cmd.code}")

    async def namesrv_request(self, cmd: RemotingCommand,
                              unsure: frozenset[int] = frozenset()) -> RemotingCommand:
        """A request to the name servers, starting with the one that answered last and
        trying each in turn (a dead one is skipped, and the next that answers is
        remembered). An answer with a code in `unsure` is taken only when no other name
        server answers better: name servers are peers that learn from the brokers'
        registrations, and one just restarted knows nothing yet."""
        last: Exception | None = None
        doubtful: RemotingCommand | None = None
        n = len(self.namesrvs)
        for i in range(n):
            at = (self._ns_index + i) % n
            addr = self.namesrvs[at]
            try:
                resp = await self.remoting.invoke(addr, cmd, self.request_timeout)
            except RemotingError as e:
                last = e
                continue
            if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                last = RemotingError(f"{addr} is not a name server ({resp.remark}): give the "
                                     "name server's address (host:port, port 9876 by default)")
                continue
            if resp.code in unsure:
                doubtful = doubtful or resp
                continue
            self._ns_index = at
            return resp
        if doubtful is not None:
            return doubtful
        raise RemotingError(f"no name server answered: {last}")

    async def broker_request(self, addr: str, cmd: RemotingCommand,
                             timeout: float | None = None) -> RemotingCommand:
        return await self.remoting.invoke(addr, cmd, timeout or self.request_timeout)

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        resp = await self.namesrv_request(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                          ext={"topic": topic}),
                                          unsure=frozenset({ResponseCode.TOPIC_NOT_EXIST}))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise MQClientError(resp.code, resp.remark)
        doc = loads_lenient(cast(bytes, resp.body))  # a received body is bytes
        route = TopicRoute(topic, doc.get("queueDatas") or [], doc.get("brokerDatas") or [])
        self.routes[topic] = route
        return route

    async def route(self, topic: str, refresh: bool = False) -> TopicRoute | None:
        if refresh or topic not in self.routes:
            return await self.fetch_route(topic)
        return self.routes[topic]

    async def look_past_silent_masters(self, silent_s: float) -> None:
        """A master that owes this client answers and has said nothing for `silent_s` may
        have been replaced (paused, cut off, hung): the routes naming it are fetched again,
        and where one now names another master, the connection to the old one is dropped,
        so the sends waiting on it fail now and are retried on the new master, not at their
        timeout (as a killed master's sends fail when its connection resets). Their fate
        is as unknown as a timed-out send's."""
        silent = set(self.remoting.silent(silent_s))
        for topic, route in list(self.routes.items()):
            old = _masters(route)
            if not silent.intersection(old.values()):
                continue
            new = await self.fetch_route(topic)
            for name, addr in old.items():
                now = new.broker_addr(name) if new is not None else None
                if addr in silent and now not in (None, addr):
                    log.warning("broker %s has owed answers for %.1f s and the route names "
                                "%s as %s's master now: its waiting requests fail now",
                                addr, silent_s, now, name)
                    self.remoting.abort(addr)
                    silent.discard(addr)
                elif addr in silent and now == addr and new is not None:
                    await self._report_unreachable(name, addr, new)

    async def follow_masters(self, topics: Iterable[str]) -> None:
        """A broker says it became its group's master: the routes of `topics` are fetched
        again (the name server, not the broker, says who is master), and where one names
        another master than before, the connection to the old one is dropped, so the long
        polls waiting on a master that was paused or cut off fail now and go to the new one
        rather than at their timeout (suspend + 5 s)."""
        for topic in topics:
            old = self.routes.get(topic)
            new = await self.fetch_route(topic)
            if old is None or new is None:
                continue
            for name, addr in _masters(old).items():
                now = new.broker_addr(name)
                if addr and now not in (None, addr):
                    log.info("%s's master moved from %s to %s", name, addr, now)
                    self.remoting.abort(addr)

    async def _report_unreachable(self, name: str, master: str, route: TopicRoute) -> None:
        """Tell the group's other brokers that its master does not answer this client: a
        DLedger leader no client reaches hands over to a follower whose clients say so
        (broker/modes/client_handover.py). At most once per REPORT_EVERY_S a group."""
        now = time.monotonic()
        if now - self._reported.get(name, float("-inf")) < REPORT_EVERY_S:
            return
        self._reported[name] = now
        others = [a for bd in route.broker_datas if bd["brokerName"] == name
                  for bid, a in bd["brokerAddrs"].items() if str(bid) != str(MASTER_ID)]
        if not others:
            return
        log.warning("%s's master %s owes this client answers and says nothing; telling %s",
                    name, master, ", ".join(others))
        results = await asyncio.gather(*(self.remoting.invoke(a, RemotingCommand(
            RequestCode.REPORT_MASTER_UNREACHABLE, ext={"brokerName": name,
                                                        "masterAddr": master}),
            REPORT_TIMEOUT_S) for a in others), return_exceptions=True)
        for a, r in zip(others, results):
            log.debug("report to %s: %s", a, r.remark if isinstance(r, RemotingCommand) else r)

    def broker_addrs(self) -> set[str]:
        return {addr for r in self.routes.values() for bd in r.broker_datas
                for addr in bd["brokerAddrs"].values()}

    def master_addr(self, broker_name: str) -> str | None:
        """The group's master as the most recently fetched route naming the group says:
        an older route of another topic (TBW102's, fetched to create a topic) may still name
        a master deposed since."""
        addr, newest = None, float("-inf")
        for r in self.routes.values():
            if r.fetched > newest and r.names(broker_name):
                addr, newest = r.broker_addr(broker_name), r.fetched
        return addr

    def read_addr(self, broker_name: str) -> str | None:
        """The master's address, or a slave's while the master is gone (reads only)."""
        return self.master_addr(broker_name) or next(
            (a for r in self.routes.values() if (a := r.read_addr(broker_name))), None)

    async def heartbeat(self, producers: list[str],
                        consumers: list[dict[str, Any]]) -> bool:
        """Tell every known broker about this client; False if one did not hear it.
        MQClientError when a broker refuses a subscription (SUBSCRIPTION_PARSE_FAILED)."""
        body = json.dumps({"clientID": self.client_id,
                           "producerDataSet": [{"groupName": g} for g in producers],
                           "consumerDataSet": consumers}).encode()
        ok = True
        for addr in self.broker_addrs():
            try:
                resp = await self.broker_request(addr, RemotingCommand(RequestCode.HEART_BEAT,
                                                                       body=body))
            except RemotingError as e:
                ok = False
                log.debug("heartbeat to %s failed: %s", addr, e)
                continue
            if resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
                raise MQClientError(resp.code, resp.remark)
        return ok

    async def close(self) -> None:
        await self.remoting.close()


def _masters(route: TopicRoute) -> dict[str, str | None]:
    """Each group of `route` -> its master's address (None: it has none)."""
    return {bd["brokerName"]: bd["brokerAddrs"].get(str(MASTER_ID))
            for bd in route.broker_datas}


async def periodic(interval: float, fn: Callable[[], Awaitable[object]], name: str) -> None:
    """Run `fn()` every `interval` seconds until cancelled, logging its failures."""
    while True:
        await asyncio.sleep(interval)
        try:
            await fn()
        except (RemotingError, MQClientError) as e:
            log.debug("%s: %s", name, e)
        except Exception:
            log.exception("%s failed", name)
