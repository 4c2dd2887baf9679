"""The `ledgermq` command line."""
from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import asyncio

import click
from rich.console import Console
from rich.table import Table

from .config import ConfigError


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log debug detail.")
def main(verbose: bool) -> None:
    """ledgermq: a RocketMQ-compatible message broker with a replicated commit log."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command("store-demo")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Store directory (default: a temporary one).")
@click.option("--messages", default=100_000, show_default=True, help="Messages to append.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def store_demo(data: Path | None, messages: int, as_json: bool) -> None:
    """Append messages to a store, read them back through the consume queue, and report."""
    from .store import MessageStore, StoreConfig
    from .store.message import decode_message

    root = data or Path(tempfile.mkdtemp(prefix="ledgermq-demo-"))
    cfg = StoreConfig(storePathRootDir=str(root), mappedFileSizeCommitLog=64 << 20,
                      maxHashSlotNum=10_000, maxIndexNum=40_000)
    store = MessageStore(cfg)
    report = store.open()
    topic, batch = "DemoTopic", 1000
    t0 = time.perf_counter()
    sent = 0
    while sent < messages:
        n = min(batch, messages - sent)
        bodies = [b"message %08d " % (sent + i) + b"." * 80 for i in range(n)]
        result = store.put(store.encode(topic, 0, bodies, b"TAGS\x01demo\x02", "demo"))
        if not result.ok:
            raise click.ClickException(f"append failed: {result.status.value} {result.error}")
        sent += n
    wrote = time.perf_counter() - t0
    t0 = time.perf_counter()
    offset, read, last = store.min_offset_in_queue(topic, 0), 0, None
    while True:
        got = store.get_messages(topic, 0, offset, max_count=1000, max_bytes=1 << 30)
        if not got.message_count:
            break
        read += got.message_count
        offset = got.next_begin_offset
        last = got.messages()[-1]
    last = decode_message(last) if last is not None else None
    readt = time.perf_counter() - t0
    summary = {"store": str(root), "recovered_from_crash": report.crashed,
               "appended": sent, "append_msgs_per_s": round(sent / wrote),
               "read": read, "read_msgs_per_s": round(read / readt) if readt else None,
               "queue_max_offset": store.max_offset_in_queue(topic, 0),
               "last_body": last.body.decode() if last else None}
    store.close()
    click.echo(json.dumps(summary, indent=None if as_json else 2))


def _broker_settings(conf: Path | None, overrides: dict[str, str]):
    from .broker import load_broker_config
    return load_broker_config(conf, {k: v for k, v in overrides.items() if v is not None})


def _ready(what: dict, as_json: bool) -> None:
    """One line on stdout once listening: scripts and tests wait for it."""
    if as_json:
        click.echo(json.dumps({"ready": True, **what}))
    else:
        click.echo("ready: " + " ".join(f"{k}={v}" for k, v in what.items()))
    sys.stdout.flush()


@main.command()
@click.option("-c", "--config", "conf", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help="A broker.conf (RocketMQ properties format).")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Store directory (storePathRootDir); default ~/.ledgermq/dev.")
@click.option("--namesrv-port", default=9876, show_default=True)
@click.option("--port", default=None, type=int, help="Broker port (listenPort; default 10911).")
@click.option("--json", "as_json", is_flag=True, help="Print the ready line as JSON.")
def dev(conf: Path | None, data: Path | None, namesrv_port: int, port: int | None,
        as_json: bool) -> None:
    """Name server + broker in one process on 127.0.0.1 (the embedded default)."""
    from .broker import Broker
    from .namesrv import NamesrvConfig, NameServer
    from .server import run, serve_until

    data = data or Path.home() / ".ledgermq" / "dev"
    bcfg, scfg, _ = _broker_settings(conf, {"storePathRootDir": str(data),
                                            "listenPort": None if port is None else str(port)})
    if conf is None or not bcfg.namesrvAddr:
        bcfg.namesrvAddr = f"127.0.0.1:{namesrv_port}"
    namesrv = NameServer(NamesrvConfig(listenPort=namesrv_port))

    async def main_(stop):
        broker = Broker(bcfg, scfg)
        await namesrv.start()
        try:
            if namesrv_port == 0:
                broker.config.namesrvAddr = namesrv.address
            await broker.start()
            _ready({"namesrv": namesrv.address, "broker": broker.address,
                    "store": str(scfg.root)}, as_json)
            await serve_until(stop)
            await broker.stop()
        finally:
            await namesrv.stop()

    run(main_)


@main.command()
@click.option("--port", default=9876, show_default=True, help="listenPort")
@click.option("--bind", default="127.0.0.1", show_default=True, help="bindAddress")
@click.option("--json", "as_json", is_flag=True)
def namesrv(port: int, bind: str, as_json: bool) -> None:
    """Run a name server."""
    from .namesrv import NamesrvConfig, NameServer
    from .server import run, serve_until

    ns = NameServer(NamesrvConfig(listenPort=port, bindAddress=bind))

    async def main_(stop):
        await ns.start()
        _ready({"namesrv": ns.address}, as_json)
        await serve_until(stop)
        await ns.stop()

    run(main_)


@main.command()
@click.option("-c", "--config", "conf", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-n", "--namesrv", "namesrv_addr", default=None, help="namesrvAddr override")
@click.option("--json", "as_json", is_flag=True)
def broker(conf: Path, namesrv_addr: str | None, as_json: bool) -> None:
    """Run a broker from a broker.conf."""
    from .broker import Broker
    from .server import run, serve_until

    bcfg, scfg, unknown = _broker_settings(conf, {"namesrvAddr": namesrv_addr})
    b = Broker(bcfg, scfg)

    async def main_(stop):
        await b.start()
        _ready({"broker": b.address, "brokerName": bcfg.brokerName,
                "unknownKeys": ",".join(unknown)}, as_json)
        await serve_until(stop)
        await b.stop()

    run(main_)


def _aio(coro):
    from .client import MQClientError
    from .remoting import RemotingError
    try:
        return asyncio.run(coro)
    except (MQClientError, RemotingError) as e:
        raise click.ClickException(str(e)) from None


def _emit(data, as_json: bool, render) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=None, default=str))
    else:
        render(data)


def _progress(label: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())


NAMESRV_OPT = click.option("-n", "--namesrv", default="127.0.0.1:9876", show_default=True,
                           help="Name server address(es), ';'-separated.")


@main.command()
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("--count", default=1, show_default=True, help="Messages to send.")
@click.option("--body", default=None, help="Body text ({i} is replaced by the index); "
              "default: read lines from stdin.")
@click.option("--tags", default=None)
@click.option("--keys", default=None, help="Keys ({i} is replaced by the index).")
@click.option("--batch", default=1, show_default=True, help="Messages per batch send.")
@click.option("--group", default="ledgermq-cli-producer", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def produce(namesrv, topic, count, body, tags, keys, batch, group, as_json):
    """Send messages to a topic."""
    from .client import Message, Producer

    if body is None:
        lines = [line.rstrip("\n") for line in sys.stdin]
        make = lambda i: lines[i]  # noqa: E731
        count = len(lines)
    else:
        make = lambda i: body.replace("{i}", str(i))  # noqa: E731

    def message(i):
        return Message(topic, make(i).encode(), tags=tags,
                       keys=keys.replace("{i}", str(i)) if keys else None)

    async def go():
        results, t0 = [], time.perf_counter()
        async with Producer(group, namesrv) as p:
            with _progress(f"sending to {topic}") as bar:
                task = bar.add_task("send", total=count)
                for start in range(0, count, batch):
                    msgs = [message(i) for i in range(start, min(count, start + batch))]
                    r = await (p.send(msgs[0]) if len(msgs) == 1 else p.send_batch(msgs))
                    results.append({"status": r.status.value, "msgId": r.msg_id,
                                    "offsetMsgId": r.offset_msg_id, "queueId": r.queue.queue_id,
                                    "broker": r.queue.broker_name, "queueOffset": r.queue_offset})
                    bar.advance(task, len(msgs))
        return results, time.perf_counter() - t0

    results, took = _aio(go())
    summary = {"topic": topic, "sent": count, "seconds": round(took, 3),
               "msgs_per_s": round(count / took) if took else None, "results": results}
    _emit(summary, as_json, lambda s: click.echo(
        "\n".join(f"{r['status']} msgId={r['msgId']} queue={r['broker']}:{r['queueId']} "
                  f"offset={r['queueOffset']}" for r in s["results"][-10:])
        + f"\nsent {s['sent']} in {s['seconds']}s"))


@main.command()
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("-g", "--group", default="ledgermq-cli-consumer", show_default=True)
@click.option("--broker", default=None, help="Read this broker directly (host:port), "
              "without the name server.")
@click.option("--tags", "expression", default="*", show_default=True,
              help="Tag filter, e.g. 'a || b'.")
@click.option("--from-beginning", is_flag=True, help="Start at each queue's first offset "
              "instead of the group's committed offset.")
@click.option("--count", default=0, help="Stop after this many messages (0: all there is).")
@click.option("--commit/--no-commit", default=True, show_default=True,
              help="Commit the group's progress to the broker.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def consume(namesrv, topic, group, broker, expression, from_beginning, count, commit, as_json):
    """Read the messages a topic holds (pulling every queue until it is drained)."""
    from .client import MessageQueue, PullConsumer, PullStatus
    from .remoting import RemotingCommand, RequestCode

    async def queues(c):
        if broker is None:
            return await c.fetch_queues(topic)
        resp = await c.instance.broker_request(broker, RemotingCommand(
            RequestCode.GET_ALL_TOPIC_CONFIG))
        tc = json.loads(resp.body)["topicConfigTable"].get(topic)
        if tc is None:
            raise click.ClickException(f"broker {broker} has no topic {topic}")
        name = "direct"
        c.instance.routes["__direct__"] = _direct_route(topic, name, broker, tc["readQueueNums"])
        return [MessageQueue(topic, name, q) for q in range(tc["readQueueNums"])]

    async def go():
        n = 0
        async with PullConsumer(group, namesrv if broker is None else broker) as c:
            for q in await queues(c):
                offset = 0 if from_beginning else (await c.query_offset(q) or 0)
                while not count or n < count:
                    r = await c.pull(q, offset, 256, expression)
                    for m in r.messages[:count - n if count else None]:
                        n += 1
                        line = {"topic": m.topic, "queueId": m.queue_id,
                                "queueOffset": m.queue_offset, "msgId": m.msg_id,
                                "tags": m.tags, "keys": m.keys,
                                "body": m.body.decode("utf-8", "replace")}
                        click.echo(json.dumps(line) if as_json else
                                   f"[{m.queue_id}:{m.queue_offset}] {line['body']}")
                    if r.status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                        break
                    offset = r.next_begin_offset
                if commit and broker is None:
                    await c.commit(q, offset)
        return n

    n = _aio(go())
    if not as_json:
        click.echo(f"-- {n} messages", err=True)


def _direct_route(topic, name, addr, queues):
    from .client.instance import TopicRoute
    return TopicRoute(topic, [{"brokerName": name, "readQueueNums": queues,
                               "writeQueueNums": queues, "perm": 6}],
                      [{"cluster": "", "brokerName": name, "brokerAddrs": {"0": addr}}])


@main.group()
def admin() -> None:
    """Administration, with mqadmin's command names."""


def _admin_call(namesrv, fn):
    from .client.admin import Admin

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
    _emit(route, True, None)


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
@click.option("-i", "--msg-id", required=True, help="Offset message id.")
@click.option("--json", "as_json", is_flag=True)
def query_msg_by_id(namesrv, msg_id, as_json):
    """A message by its offset message id."""
    from .store.message import MessageFormatError
    try:
        m = _admin_call(namesrv, lambda a: a.query_msg_by_id(msg_id))
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


@main.command()
@click.option("--protocol", type=click.Choice(["raft"]), default="raft", show_default=True)
@click.option("--seeds", default=100, show_default=True, help="How many seeds to run.")
@click.option("--seed", "first_seed", default=0, show_default=True, help="The first seed.")
@click.option("--steps", default=4000, show_default=True, help="Simulated events per seed.")
@click.option("--inject-bug", "bugs", multiple=True, help="Switch on a known protocol bug "
              "(test-only), to see the checker catch it.")
@click.option("--list-bugs", is_flag=True, help="List the bugs --inject-bug knows.")
@click.option("--profile", type=click.Choice(["random", "nemesis"]), default="random",
              show_default=True, help="Fault profile: drawn per seed, or worst-moment faults.")
@click.option("--stop-on-failure/--keep-going", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def sim(protocol, seeds, first_seed, steps, bugs, list_bugs, profile, stop_on_failure,
        as_json):
    """Run the replication protocol in the deterministic simulator under random faults."""
    from .replication.raft import BUGS
    from .sim import PROFILES, RaftSim

    if list_bugs:
        _emit(BUGS, as_json, lambda b: click.echo("\n".join(f"{k:22} {v}" for k, v in b.items())))
        return
    unknown = [b for b in bugs if b not in BUGS]
    if unknown:
        raise click.BadParameter(f"unknown bug(s) {', '.join(unknown)}; see --list-bugs")
    failures, runs, t0 = [], 0, time.perf_counter()
    with _progress(f"{protocol} seeds") as bar:
        task = bar.add_task("sim", total=seeds)
        for seed in range(first_seed, first_seed + seeds):
            r = RaftSim(seed, steps=steps, bugs=frozenset(bugs), profile=PROFILES[profile]).run()
            runs += 1
            bar.advance(task)
            if not r.ok:
                failures.append(r)
                if stop_on_failure:
                    break
    replay = lambda r: (f"ledgermq sim --protocol {protocol} --seed {r.seed} --seeds 1 "  # noqa: E731
                        f"--steps {steps} --profile {profile}"
                        + "".join(f" --inject-bug {b}" for b in bugs))
    summary = {"protocol": protocol, "seeds_run": runs, "failures": len(failures),
               "seconds": round(time.perf_counter() - t0, 2), "bugs": list(bugs),
               "failed": [{"seed": r.seed, "violation": r.violation, "replay": replay(r),
                           "steps": r.steps, "virtual_ms": r.virtual_ms, "trace": r.trace}
                          for r in failures]}

    def render(s):
        for f in s["failed"]:
            click.echo(f"seed {f['seed']} FAILED: {f['violation']}")
            click.echo(f"replay: {f['replay']}")
            click.echo("trace (last events):")
            click.echo("\n".join("  " + line for line in f["trace"]))
        click.echo(f"{s['seeds_run']} seeds, {s['failures']} failed, {s['seconds']}s")
    _emit(summary, as_json, render)
    if failures:
        sys.exit(1)


@main.group()
def cluster() -> None:
    """A name server and a replica group as local processes (127.0.0.1)."""


@cluster.command("up")
@click.option("--mode", type=click.Choice(["dledger"]), default="dledger", show_default=True)
@click.option("--replicas", default=3, show_default=True)
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_up(mode, replicas, directory, as_json):
    """Start the group; prints the name server and each node's name, pid and ports."""
    from .cluster import up
    if replicas < 1:
        raise click.BadParameter("--replicas must be at least 1")
    try:
        state = up(mode, replicas, directory)
    except (RuntimeError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    _emit(state, as_json, lambda s: click.echo(
        f"namesrv {s['namesrv']}\n" + "\n".join(
            f"{p['name']:8} pid={p['pid']} port={p['port']}" +
            (f" raft={p['raftPort']}" if "raftPort" in p else "") for p in s["processes"])))


@cluster.command("status")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_status(directory, as_json):
    """Each process: alive or not, and (DLedger) role, term, leader, commit."""
    from .cluster import status
    state = status(directory)
    _emit(state, as_json, lambda s: click.echo("\n".join(
        f"{p['name']:8} pid={p['pid']} {'up' if p['alive'] else 'DOWN'} "
        f"{p.get('role', '')} term={p.get('term', '')} commit={p.get('commit', '')}"
        for p in s["processes"])))


@cluster.command("down")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def cluster_down(directory, as_json):
    """Stop every process of the group (by the pids `up` recorded)."""
    from .cluster import down
    state = down(directory)
    _emit(state, as_json, lambda s: click.echo(f"stopped {len(s['processes'])} processes"))


@admin.command("dledgerStatus")
@NAMESRV_OPT
@click.option("-b", "--broker", required=True, help="Broker address (host:port).")
@click.option("--json", "as_json", is_flag=True)
def dledger_status(namesrv, broker, as_json):
    """Role, term, leader, begin/end/committed index and per-peer watermarks."""
    info = _admin_call(namesrv, lambda a: a.broker_status(broker))
    if "dledger" not in info:
        raise click.ClickException(f"{broker} does not run a DLedger commit log")
    _emit(json.loads(info["dledger"]), True, None)


def run() -> None:
    try:
        main()
    except ConfigError as e:
        click.echo(f"config error: {e}", err=True)
        sys.exit(2)
