"""Administration with mqadmin's command names."""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from . import NAMESRV_OPT, _aio, _emit, main


@main.group()
def admin() -> None:
    """Administration, with mqadmin's command names."""


def _admin_call(namesrv, fn):
    from ..client.admin import Admin

    async def go():
        async with Admin(namesrv) as a:
            return await fn(a)
    return _aio(go())


@admin.command("topicList")
@NAMESRV_OPT
@click.option("--json", "as_json", is_flag=True)
def topic_list(namesrv, as_json):
    """All topics the name server knows."""
    topics = _admin_call(namesrv, lambda a: a.topic_list())
    _emit(topics, as_json, lambda t: click.echo("\n".join(t)))


@admin.command("topicRoute")
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("--json", "as_json", is_flag=True)
def topic_route(namesrv, topic, as_json):
    """Brokers and queues of a topic."""
    route = _admin_call(namesrv, lambda a: a.topic_route(topic))

    def render(r):
        addrs = {b["brokerName"]: b.get("brokerAddrs", {}) for b in r.get("brokerDatas", [])}
        table = Table("broker", "read queues", "write queues", "perm", "addresses (id: host)")
        for q in r.get("queueDatas", []):
            where = addrs.get(q["brokerName"], {})
            table.add_row(q["brokerName"], str(q["readQueueNums"]), str(q["writeQueueNums"]),
                          str(q["perm"]), " ".join(f"{i}: {a}" for i, a in sorted(where.items())))
        Console().print(table)
    _emit(route, as_json, render)


@admin.command("updateTopic")
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("-b", "--broker", default=None, help="Broker address (host:port).")
@click.option("-c", "--cluster", default=None, help="Every master of this cluster.")
@click.option("-r", "--read-queues", default=8, show_default=True)
@click.option("-w", "--write-queues", default=8, show_default=True)
@click.option("-p", "--perm", default=6, show_default=True)
@click.option("-o", "--order", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
def update_topic(namesrv, topic, broker, cluster, read_queues, write_queues, perm, order,
                 as_json):
    """Create or update a topic."""
    if not 1 <= read_queues <= 1024 or not 1 <= write_queues <= 1024:
        raise click.BadParameter("queue numbers must be in 1..1024")
    done = _admin_call(namesrv, lambda a: a.update_topic(
        topic, broker=broker, cluster=cluster, read_queues=read_queues,
        write_queues=write_queues, perm=perm, order=order))
    _emit({"topic": topic, "brokers": done}, as_json,
          lambda d: click.echo(f"topic {topic} updated on {', '.join(d['brokers'])}"))


@admin.command("clusterList")
@NAMESRV_OPT
@click.option("--json", "as_json", is_flag=True)
def cluster_list(namesrv, as_json):
    """Clusters, their brokers and addresses."""
    info = _admin_call(namesrv, lambda a: a.cluster_list())

    def render(info):
        table = Table("cluster", "broker", "id", "address")
        for cluster, names in info["clusterAddrTable"].items():
            for name in names:
                for bid, addr in info["brokerAddrTable"][name]["brokerAddrs"].items():
                    table.add_row(cluster, name, bid, addr)
        Console().print(table)
    _emit(info, as_json, render)


@admin.command("brokerStatus")
@NAMESRV_OPT
@click.option("-b", "--broker", required=True, help="Broker address (host:port).")
@click.option("--json", "as_json", is_flag=True)
def broker_status(namesrv, broker, as_json):
    """A broker's runtime figures."""
    info = _admin_call(namesrv, lambda a: a.broker_status(broker))
    _emit(info, as_json, lambda i: click.echo("\n".join(f"{k:28} : {v}" for k, v in sorted(i.items()))))


@admin.command("consumerProgress")
@NAMESRV_OPT
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", default=None)
@click.option("--json", "as_json", is_flag=True)
def consumer_progress(namesrv, group, topic, as_json):
    """Per queue: broker offset, the group's committed offset, and the lag."""
    rows = _admin_call(namesrv, lambda a: a.consumer_progress(group, topic))

    def render(rows):
        table = Table("topic", "broker", "queue", "brokerOffset", "consumerOffset", "diff")
        for r in rows:
            table.add_row(r["topic"], r["brokerName"], str(r["queueId"]), str(r["brokerOffset"]),
                          str(r["consumerOffset"]), str(r["diff"]))
        Console().print(table)
        click.echo(f"total diff: {sum(r['diff'] for r in rows)}")
    _emit(rows, as_json, render)


def _message_json(m) -> dict:
    return {"topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "tags": m.tags,
            "keys": m.keys, "bornTimestamp": m.born_timestamp,
            "storeTimestamp": m.store_timestamp, "reconsumeTimes": m.reconsume_times,
            "properties": m.properties, "body": m.body.decode("utf-8", "replace")}


@admin.command("queryMsgById")
@NAMESRV_OPT
@click.option("-i", "--msg-id", required=True,
              help="The broker's offsetMsgId, or the client's msgId (its unique key).")
@click.option("-t", "--topic", default=None,
              help="Where to look for a client msgId (default: every topic).")
@click.option("--json", "as_json", is_flag=True)
def query_msg_by_id(namesrv, msg_id, topic, as_json):
    """A message by either of its ids, as `produce` prints them."""
    from ..wire.message import MessageFormatError
    try:
        m = _admin_call(namesrv, lambda a: a.query_msg_by_id(msg_id, topic))
    except MessageFormatError as e:
        raise click.BadParameter(str(e)) from None
    _emit(_message_json(m), as_json,
          lambda d: click.echo("\n".join(f"{k:16}: {v}" for k, v in d.items())))


@admin.command("queryMsgByKey")
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("-k", "--key", required=True)
@click.option("--json", "as_json", is_flag=True)
def query_msg_by_key(namesrv, topic, key, as_json):
    """Messages of a topic by key (KEYS or the client's unique id)."""
    msgs = _admin_call(namesrv, lambda a: a.query_msg_by_key(topic, key))
    _emit([_message_json(m) for m in msgs], as_json, lambda ms: click.echo(
        "\n".join(f"{m['msgId']} queue={m['queueId']} offset={m['queueOffset']} {m['body']}"
                  for m in ms) or "no message"))


@admin.command("dledgerStatus")
@NAMESRV_OPT
@click.option("-b", "--broker", required=True, help="Broker address (host:port).")
@click.option("--json", "as_json", is_flag=True)
def dledger_status(namesrv, broker, as_json):
    """Role, term, leader, begin/end/committed index and per-peer watermarks."""
    info = _admin_call(namesrv, lambda a: a.broker_status(broker))
    if "dledger" not in info:
        raise click.ClickException(f"{broker} does not run a DLedger commit log")

    def render(st):
        click.echo(f"{st['selfId']}: {st['role']}, term {st['term']}, leader {st['leader']}, "
                   f"entries {st['begin']}..{st['end']}, committed {st['commit']} "
                   f"(offset {st['committedOffset']} of {st['logEndOffset']})")
        if st.get("watermarks"):
            table = Table("peer", "address", "acknowledged index", "behind")
            for peer, index in sorted(st["watermarks"].items()):
                table.add_row(peer, st["peers"].get(peer, ""), str(index), str(st["end"] - index))
            Console().print(table)
    _emit(json.loads(info["dledger"]), as_json, render)
