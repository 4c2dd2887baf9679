"""What each page shows, gathered through the admin API (the CLI's): plain dicts and
lists for the templates, and for the tests to compare with the admin API's answers."""
from __future__ import annotations

import asyncio
import json
import time

from ..client.admin import Admin
from ..client.message import MessageExt
from ..remoting import RemotingError
from ..wire.message import decode_offset_msg_id

SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_", "%RETRY%", "%DLQ%", "SCHEDULE_TOPIC", "TBW102",
                   "TRANS_CHECK_MAX_TIME_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT",
                   "SELF_TEST_TOPIC", "DefaultCluster", "CID_", "TOOLS_CONSUMER")


def is_system(name: str) -> bool:
    return name.startswith(SYSTEM_PREFIXES)


async def broker_infos(admin: Admin, addrs: list[str]) -> dict[str, dict]:
    """Each broker's runtime info, or {"error": why} for one that does not answer."""
    async def one(addr: str) -> dict:
        try:
            return await admin.broker_status(addr)
        except (RemotingError, OSError, asyncio.TimeoutError) as e:
            return {"error": str(e) or type(e).__name__}
        except Exception as e:  # noqa: BLE001 - an MQClientError or a broker's odd answer
            return {"error": f"{type(e).__name__}: {e}"}
    found = await asyncio.gather(*(one(a) for a in addrs))
    return dict(zip(addrs, found))


async def cluster_view(admin: Admin) -> list[dict]:
    """One row per broker the name servers know: cluster, group, id, address, role,
    version, commit-log size, disk use, connections."""
    info = await admin.cluster_list()
    rows = []
    for cluster, names in sorted(info["clusterAddrTable"].items()):
        for name in sorted(names):
            addrs = info["brokerAddrTable"].get(name, {}).get("brokerAddrs", {})
            for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                rows.append({"cluster": cluster, "group": name, "id": int(bid), "addr": addr})
    infos = await broker_infos(admin, [r["addr"] for r in rows])
    for r in rows:
        st = infos[r["addr"]]
        r.update(error=st.get("error"), role=st.get("brokerRole", "?"),
                 version=st.get("brokerVersionDesc", "?"),
                 messages_bytes=int(st.get("commitLogMaxOffset", 0)) -
                 int(st.get("commitLogMinOffset", 0)),
                 disk=st.get("diskUsedRatio", "?"), connections=st.get("connections", "?"))
    return rows


class Rates:
    """Messages per second of each topic, from the change in its queues' max offsets
    between two looks at most `window_s` apart (no second path to the broker's stats)."""

    def __init__(self, window_s: float = 120.0):
        self.window_s = window_s
        self.last: dict[str, tuple[float, int]] = {}

    def observe(self, topic: str, total: int, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        before = self.last.get(topic)
        self.last[topic] = (now, total)
        if before is None or not 0 < now - before[0] <= self.window_s:
            return None
        return max(0, total - before[1]) / (now - before[0])


async def topics_view(admin: Admin, rates: Rates, system: bool = False) -> list[dict]:
    names = sorted(await admin.topic_list())
    if not system:  # (also those named after a cluster or a broker group: routing topics)
        info = await admin.cluster_list()
        servers = set(info["clusterAddrTable"]) | set(info["brokerAddrTable"])
        names = [t for t in names if not is_system(t) and t not in servers]
    stats = await asyncio.gather(*(topic_view(admin, rates, t) for t in names))
    return list(stats)


async def topic_view(admin: Admin, rates: Rates, topic: str) -> dict:
    """A topic's queues (broker, id, min and max offset), message count and rate."""
    try:
        queues = await admin.topic_status(topic)
    except Exception as e:  # noqa: BLE001 - shown on the page, the others still load
        return {"topic": topic, "error": str(e), "queues": [], "brokers": [], "messages": 0,
                "rate": None}
    total = sum(q["maxOffset"] for q in queues)
    return {"topic": topic, "queues": queues, "error": None,
            "brokers": sorted({q["brokerName"] for q in queues}),
            "messages": sum(q["maxOffset"] - q["minOffset"] for q in queues),
            "rate": rates.observe(topic, total)}


async def groups_view(admin: Admin, system: bool = False) -> list[dict]:
    """Every subscription group known to a master, with its settings per broker."""
    by_group: dict[str, dict] = {}
    for broker, table in (await admin.sub_groups()).items():
        for name, conf in table.items():
            if system or not is_system(name):
                g = by_group.setdefault(name, {"group": name, "brokers": [], "conf": conf})
                g["brokers"].append(broker)
    return [by_group[k] for k in sorted(by_group)]


async def group_view(admin: Admin, group: str) -> dict:
    """A group's lag per queue and its online members."""
    rows, members = await asyncio.gather(admin.consumer_progress(group),
                                         admin.consumer_connections(group))
    return {"group": group, "queues": rows, "members": members,
            "lag": sum(r["diff"] for r in rows)}


def message_row(m: MessageExt, preview: int = 200) -> dict:
    """What the search shows of a message: ids, where it is stored, a body preview."""
    host, port, offset = decode_offset_msg_id(m.offset_msg_id)
    body = bytes(m.body)
    text = body[:preview].decode("utf-8", "replace")
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic,
            "tags": m.tags or "", "keys": m.keys or "", "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "storedAt": f"{host}:{port}",
            "commitLogOffset": offset, "bodySize": len(body),
            "bodyPreview": text + ("…" if len(body) > preview else ""),
            "storeTimestamp": m.store_timestamp, "bornTimestamp": m.born_timestamp,
            "properties": dict(sorted(m.properties.items()))}


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))
