"""The `ledgermq` command line."""
from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import click

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


def run() -> None:
    try:
        main()
    except ConfigError as e:
        click.echo(f"config error: {e}", err=True)
        sys.exit(2)
