"""Topic routes for RocketMQ 5 clients: the name server's route (brokers register their
gRPC address with it, `grpcAddrs` per broker data) as the API's message queues, each with
its group master's gRPC endpoint."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from ...apis import definition_pb2 as pb
from ...remoting import RemotingCommand, RemotingError, RequestCode, ResponseCode
from ...remoting.codes import PERM_READ, PERM_WRITE

if TYPE_CHECKING:
    from ..broker import Broker

ALL_TYPES = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
_PERMISSION = {PERM_READ | PERM_WRITE: pb.READ_WRITE, PERM_READ: pb.READ, PERM_WRITE: pb.WRITE}


async def route_doc(broker: Broker, topic: str) -> dict[str, Any] | None:
    """The route as the name servers have it (RemotingError when none answers), or this
    broker's own queues when it has no name server; None: no such topic."""
    link = broker.namesrv
    if not link.namesrvs:
        return local_route(broker, topic)
    last: Exception | None = None
    for addr in link.namesrvs:
        try:
            r = await link.client.invoke(addr, RemotingCommand(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, ext={"topic": topic}), 3.0)
        except RemotingError as e:
            last = e
            continue
        if r.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if r.code == ResponseCode.SUCCESS:
            doc: dict[str, Any] = json.loads(cast(bytes, r.body))  # (decoded: bytes)
            return doc
    raise RemotingError(f"no name server answered: {last}")


def local_route(broker: Broker, topic: str) -> dict[str, Any] | None:
    tc = broker.topics.get(topic)
    if tc is None:
        return None
    name = broker.config.brokerName
    return {"queueDatas": [{"brokerName": name, "readQueueNums": tc.readQueueNums,
                            "writeQueueNums": tc.writeQueueNums, "perm": tc.perm}],
            "brokerDatas": [{"brokerName": name, "grpcAddrs": {"0": broker.grpc_address}}]}


def message_queues(doc: dict[str, Any], topic: str) -> list[pb.MessageQueue]:
    """Every queue of the route whose group has a master serving gRPC."""
    grpc_of = {bd["brokerName"]: (bd.get("grpcAddrs") or {}).get("0")
               for bd in doc.get("brokerDatas", [])}
    out = []
    for qd in doc.get("queueDatas", []):
        addr = grpc_of.get(qd["brokerName"])
        if not addr:
            continue  # no master serving gRPC in that group now
        host, port = addr.rsplit(":", 1)
        broker = pb.Broker(name=qd["brokerName"], id=0, endpoints=pb.Endpoints(
            scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))]))
        r, w = int(qd["readQueueNums"]), int(qd["writeQueueNums"])
        perm = int(qd.get("perm", PERM_READ | PERM_WRITE))
        for qid in range(max(r, w)):
            bits = perm & ((PERM_READ if qid < r else 0) | (PERM_WRITE if qid < w else 0))
            out.append(pb.MessageQueue(topic=pb.Resource(name=topic), id=qid,
                                       permission=_PERMISSION.get(bits, pb.NONE),
                                       broker=broker, accept_message_types=ALL_TYPES))
    return out
