"""Sending and reading messages: produce, consume."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter, deque

import click

from . import NAMESRV_OPT, _aio, _emit, _progress, main


@main.command()
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("--count", default=1, show_default=True, help="Messages to send.")
@click.option("--body", default=None, help="Body text ({i} is replaced by the index); "
              "default: read lines from stdin.")
@click.option("--tags", default=None)
@click.option("--keys", default=None, help="Keys ({i} is replaced by the index).")
@click.option("--batch", default=1, show_default=True, help="Messages per batch send.")
@click.option("--in-flight", default=1000, show_default=True,
              help="Sends awaiting their result at once (1: one at a time).")
@click.option("--group", default="ledgermq-cli-producer", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="A JSON summary.")
@click.option("--json-each", is_flag=True, help="One JSON line per send result.")
def produce(namesrv, topic, count, body, tags, keys, batch, in_flight, group, as_json,
            json_each):
    """Send messages to a topic (pipelined: --in-flight sends await their results)."""
    from ..client import Message, Producer

    if body is None:
        if click.get_current_context().get_parameter_source("count") is \
                click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("--count needs --body: without it, each line of stdin is "
                                   "one message")
        lines = [line.rstrip("\n") for line in sys.stdin]
        if not lines:
            raise click.UsageError("stdin was empty: nothing to send (give --body, or pipe "
                                   "lines in)")
        make = lambda i: lines[i]  # noqa: E731
        count = len(lines)
    else:
        make = lambda i: body.replace("{i}", str(i))  # noqa: E731
    if batch < 1 or in_flight < 1:
        raise click.BadParameter("--batch and --in-flight must be at least 1")

    def message(i):
        return Message(topic, make(i).encode(), tags=tags,
                       keys=keys.replace("{i}", str(i)) if keys else None)

    def row(r):
        return {"status": r.status.value, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
                "queueId": r.queue.queue_id, "broker": r.queue.broker_name,
                "queueOffset": r.queue_offset}

    async def go():
        results, window, t0 = [], deque(), time.perf_counter()
        async with Producer(group, namesrv) as p:
            with _progress(f"sending to {topic}") as bar:
                task = bar.add_task("send", total=count)

                async def settle_oldest():
                    fut, n = window.popleft()
                    results.append(row(await fut))
                    bar.advance(task, n)
                try:
                    for start in range(0, count, batch):
                        msgs = [message(i) for i in range(start, min(count, start + batch))]
                        window.append((p.send_async(msgs[0]) if len(msgs) == 1 else
                                       asyncio.ensure_future(p.send_batch(msgs)), len(msgs)))
                        if len(window) >= in_flight:
                            await settle_oldest()
                    while window:
                        await settle_oldest()
                finally:  # a failed send ends the run: the sends still in flight go quietly
                    for fut, _ in window:
                        fut.cancel()
                    await asyncio.gather(*(f for f, _ in window), return_exceptions=True)
        return results, time.perf_counter() - t0

    results, took = _aio(go())
    if json_each:
        for r in results:
            click.echo(json.dumps(r))
        return
    statuses = dict(Counter(r["status"] for r in results))
    summary = {"topic": topic, "sent": count, "statuses": statuses, "seconds": round(took, 3),
               "msgs_per_s": round(count / took) if took else None,
               "first": results[0] if results else None, "last": results[-1] if results else None}
    _emit(summary, as_json, lambda s: click.echo(
        "".join(f"{r['status']} msgId={r['msgId']} offsetMsgId={r['offsetMsgId']} "
                f"queue={r['broker']}:{r['queueId']} offset={r['queueOffset']}\n"
                for r in (results if len(results) <= 10 else []))
        + f"sent {s['sent']} in {s['seconds']} s ({s['msgs_per_s'] or 0:,} msgs/s): "
        + ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items()))))


@main.command()
@NAMESRV_OPT
@click.option("-t", "--topic", required=True)
@click.option("-g", "--group", default="ledgermq-cli-consumer", show_default=True)
@click.option("--broker", default=None, help="Read this broker directly (host:port), "
              "without the name server.")
@click.option("--tags", "expression", default="*", show_default=True,
              help="Tag filter, e.g. 'a || b'.")
@click.option("--sql", default=None, help="SQL92 filter over properties, evaluated on the "
              "broker (enablePropertyFilter), e.g. \"amount > 100 AND region = 'eu'\".")
@click.option("--from-beginning", is_flag=True, help="Start at each queue's first offset "
              "instead of the group's committed offset.")
@click.option("--count", default=0, help="Stop after this many messages (0: all there is).")
@click.option("--commit/--no-commit", default=True, show_default=True,
              help="Commit the group's progress to the broker.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def consume(namesrv, topic, group, broker, expression, sql, from_beginning, count, commit,
            as_json):
    """Read the messages a topic holds (pulling every queue until it is drained)."""
    from ..client import MessageQueue, MessageSelector, PullConsumer, PullStatus
    from ..remoting import RemotingCommand, RequestCode
    if sql is not None:
        if expression != "*":
            raise click.BadParameter("give --tags or --sql, not both")
        expression = MessageSelector.by_sql(sql)

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
        # a bar only while the messages go elsewhere (a file, a pipe): not between them
        with _progress(f"reading {topic}", not sys.stdout.isatty()) as bar:
            return await read(bar, bar.add_task("read", total=count or None))

    async def read(bar, task):
        n = 0
        async with PullConsumer(group, namesrv if broker is None else broker) as c:
            for q in await queues(c):
                if count and n >= count:
                    break  # queues this run does not read keep their committed offsets
                start = 0 if from_beginning else (await c.query_offset(q) or 0)
                offset = start
                while not count or n < count:
                    r = await c.pull(q, offset, 256, expression)
                    shown = r.messages[:count - n if count else None]
                    for m in shown:
                        n += 1
                        line = {"topic": m.topic, "queueId": m.queue_id,
                                "queueOffset": m.queue_offset, "msgId": m.msg_id,
                                "tags": m.tags, "keys": m.keys,
                                "body": m.body.decode("utf-8", "replace")}
                        click.echo(json.dumps(line) if as_json else
                                   f"[{m.queue_id}:{m.queue_offset}] {line['body']}")
                    bar.advance(task, len(shown))
                    if r.status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                        break
                    if len(shown) < len(r.messages):  # stopped inside the batch
                        offset = shown[-1].queue_offset + 1
                        break
                    offset = r.next_begin_offset
                if commit and broker is None and offset != start:
                    await c.commit(q, offset)  # exactly past the last message shown
        return n

    t0 = time.perf_counter()
    n = _aio(go())
    took = time.perf_counter() - t0
    if not as_json:
        click.echo(f"-- {n} messages in {took:.2f} s ({n / took if took else 0:,.0f} msgs/s)",
                   err=True)


def _direct_route(topic, name, addr, queues):
    from ..client.instance import TopicRoute
    return TopicRoute(topic, [{"brokerName": name, "readQueueNums": queues,
                               "writeQueueNums": queues, "perm": 6}],
                      [{"cluster": "", "brokerName": name, "brokerAddrs": {"0": addr}}])
