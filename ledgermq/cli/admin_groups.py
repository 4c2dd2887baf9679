"""mqadmin's consumer-group commands: subscription group configs and offset resets."""
from __future__ import annotations

from datetime import datetime

import click
from rich.console import Console
from rich.table import Table

from ..runtime.clock import wall_ms
from . import NAMESRV_OPT, _emit
from .admin import _admin_call, admin


def parse_timestamp(text: str) -> int:
    """mqadmin's -s: epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS (local time)."""
    if text == "now":
        return wall_ms()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give epoch ms, 'now' or yyyy-MM-dd#HH:mm:ss:SSS") \
            from None


def _offsets(rows, as_json):
    def render(rows):
        table = Table("topic", "broker", "queue", "offset")
        for r in rows:
            table.add_row(r["topic"], r["brokerName"], str(r["queueId"]), str(r["offset"]))
        Console().print(table)
    _emit(rows, as_json, render)


@admin.command("resetOffsetByTime")
@NAMESRV_OPT
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", required=True,
              help="Epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS.")
@click.option("-f", "--force", type=click.BOOL, default=True, show_default=True,
              help="false: move queues back only, never past what the group has not read.")
@click.option("--json", "as_json", is_flag=True)
def reset_offset_by_time(namesrv, group, topic, timestamp, force, as_json):
    """Move a group's offsets on a topic to a time; running consumers jump too."""
    ts = parse_timestamp(timestamp)
    _offsets(_admin_call(namesrv, lambda a: a.reset_offset(group, topic, ts, force)), as_json)


@admin.command("skipAccumulatedMessage")
@NAMESRV_OPT
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("--json", "as_json", is_flag=True)
def skip_accumulated(namesrv, group, topic, as_json):
    """Move a group to the end of every queue of a topic (skip the backlog)."""
    _offsets(_admin_call(namesrv, lambda a: a.reset_offset(group, topic, -1, True)), as_json)


@admin.command("updateSubGroup")
@NAMESRV_OPT
@click.option("-g", "--group", required=True)
@click.option("-b", "--broker", default=None, help="Broker address (host:port).")
@click.option("-c", "--cluster", default=None, help="Every master of this cluster.")
@click.option("-s", "--consume-enable", type=click.BOOL, default=True, show_default=True)
@click.option("-d", "--consume-broadcast-enable", type=click.BOOL, default=True,
              show_default=True)
@click.option("-m", "--consume-from-min-enable", type=click.BOOL, default=True,
              show_default=True)
@click.option("-q", "--retry-queue-nums", type=click.IntRange(1, 1024), default=1,
              show_default=True)
@click.option("-r", "--retry-max-times", type=click.IntRange(0), default=16, show_default=True)
@click.option("-i", "--broker-id", type=click.IntRange(0), default=0, show_default=True)
@click.option("-w", "--which-broker-when-consume-slowly", type=click.IntRange(0), default=1,
              show_default=True)
@click.option("-a", "--notify-consumer-ids-changed-enable", type=click.BOOL, default=True,
              show_default=True)
@click.option("--json", "as_json", is_flag=True)
def update_sub_group(namesrv, group, broker, cluster, consume_enable, consume_broadcast_enable,
                     consume_from_min_enable, retry_queue_nums, retry_max_times, broker_id,
                     which_broker_when_consume_slowly, notify_consumer_ids_changed_enable,
                     as_json):
    """Create or update a subscription group."""
    config = {"groupName": group, "consumeEnable": consume_enable,
              "consumeBroadcastEnable": consume_broadcast_enable,
              "consumeFromMinEnable": consume_from_min_enable,
              "retryQueueNums": retry_queue_nums, "retryMaxTimes": retry_max_times,
              "brokerId": broker_id, "whichBrokerWhenConsumeSlowly":
                  which_broker_when_consume_slowly,
              "notifyConsumerIdsChangedEnable": notify_consumer_ids_changed_enable}
    done = _admin_call(namesrv, lambda a: a.update_sub_group(config, broker=broker,
                                                             cluster=cluster))
    _emit({**config, "brokers": done}, as_json,
          lambda d: click.echo(f"subscription group {group} updated on {', '.join(done)}"))


@admin.command("deleteSubGroup")
@NAMESRV_OPT
@click.option("-g", "--group", required=True)
@click.option("-b", "--broker", default=None, help="Broker address (host:port).")
@click.option("-c", "--cluster", default=None, help="Every master of this cluster.")
@click.option("--json", "as_json", is_flag=True)
def delete_sub_group(namesrv, group, broker, cluster, as_json):
    """Delete a subscription group's config."""
    done = _admin_call(namesrv, lambda a: a.delete_sub_group(group, broker=broker,
                                                             cluster=cluster))
    _emit({"groupName": group, "brokers": done}, as_json,
          lambda d: click.echo(f"subscription group {group} deleted on {', '.join(done)}"))


@admin.command("getConsumerConfig")
@NAMESRV_OPT
@click.option("-g", "--group", default=None, help="One group (default: every group).")
@click.option("--json", "as_json", is_flag=True)
def get_consumer_config(namesrv, group, as_json):
    """Subscription group configs, per broker group's master."""
    info = _admin_call(namesrv, lambda a: a.sub_groups(group))

    def render(info):
        table = Table("broker", "group", "consume", "broadcast", "retryQueues", "retryMax")
        for broker, groups in sorted(info.items()):
            for name, c in sorted(groups.items()):
                table.add_row(broker, name, str(c["consumeEnable"]),
                              str(c["consumeBroadcastEnable"]), str(c["retryQueueNums"]),
                              str(c["retryMaxTimes"]))
        Console().print(table)
    _emit(info, as_json, render)
