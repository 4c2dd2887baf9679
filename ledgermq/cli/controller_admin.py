"""Controller-mode administration (S1), with mqadmin's command names, and a classic-HA
master's endHaRecovery (ledgermq's own)."""
from __future__ import annotations

import json

import click

from . import NAMESRV_OPT, _aio, _emit
from .admin import admin

CONTROLLER_OPT = click.option("-a", "--controller", "controller", required=True,
                              help="Controller address(es), ';'-separated (controllerAddr).")
JSON_OPT = click.option("--json", "as_json", is_flag=True)
SECRET_OPT = click.option("--cluster-secret-file", "secret_file", default="",
                          help="A file holding the cluster secret (the controllers' "
                               "clusterSecret): changing metadata needs it when they have one.")


def _controller_call(addrs: str, fn, secret_file: str = ""):
    from ..client.instance import tls_context
    from ..runtime.config import ConfigError
    from ..controller.client import ControllerClient
    from ..peer_auth.core import PeerAuth, load_secret

    try:
        auth = PeerAuth(load_secret("", secret_file, file_key="--cluster-secret-file"))
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None

    async def go():
        async with ControllerClient(addrs, ssl_context=tls_context(None), auth=auth) as c:
            return await fn(c)
    return _aio(go())


def _pretty(d) -> None:
    click.echo(json.dumps(d, indent=2))


@admin.command("getSyncStateSet")
@CONTROLLER_OPT
@click.option("-b", "--broker-name", "names", multiple=True,
              help="Broker group(s); default every group.")
@JSON_OPT
def get_sync_state_set(controller, names, as_json):
    """Per broker group: master, MasterEpoch, SyncStateSet and its epoch, alive brokers."""
    data = _controller_call(controller, lambda c: c.sync_state_set(list(names)))

    def render(d):
        for name, g in d.items():
            click.echo(f"{name}: master={g['masterBrokerId']} ({g['masterAddress']}) "
                       f"masterEpoch={g['masterEpoch']} syncStateSet={g['syncStateSet']} "
                       f"syncStateSetEpoch={g['syncStateSetEpoch']} alive={g['alive']}")
            for bid, addr in g["brokers"].items():
                click.echo(f"  broker {bid}: {addr}")
    _emit(data, as_json, render)


@admin.command("getControllerMetaData")
@CONTROLLER_OPT
@JSON_OPT
def get_controller_metadata(controller, as_json):
    """Each controller node: its role, term, the leader, commit and applied index."""
    data = _controller_call(controller, lambda c: c.metadata())
    _emit(data, as_json, lambda d: click.echo("\n".join(
        f"{n['address']}: " + (f"ERROR {n['error']}" if "error" in n else
                              f"{n['controllerId']} {n['role']} term={n['term']} "
                              f"leader={n['leaderId']} commit={n['commitIndex']}")
        for n in d)))


@admin.command("getControllerConfig")
@CONTROLLER_OPT
@JSON_OPT
def get_controller_config(controller, as_json):
    """The settings a controller runs with."""
    _emit(_controller_call(controller, lambda c: c.config()), as_json, _pretty)


@admin.command("electMaster")
@CONTROLLER_OPT
@click.option("-b", "--broker-name", required=True, help="The broker group.")
@click.option("-i", "--broker-id", type=int, default=None,
              help="The broker to make master (default: the controller picks from the "
                   "SyncStateSet).")
@SECRET_OPT
@JSON_OPT
def elect_master(controller, broker_name, broker_id, secret_file, as_json):
    """Elect a new master now (from the SyncStateSet unless enableElectUncleanMaster)."""
    data = _controller_call(controller, lambda c: c.elect_master(broker_name, broker_id),
                            secret_file)

    def render(d):
        click.echo(f"{broker_name}: master is now broker {d['masterBrokerId']} "
                   f"({d['masterAddress']}) in epoch {d['masterEpoch']}")
        if d.get("unclean"):
            click.echo("WARNING: elected outside the SyncStateSet: acknowledged messages may "
                       "be lost", err=True)
    _emit(data, as_json, render)


@admin.command("cleanBrokerMetadata")
@CONTROLLER_OPT
@click.option("-b", "--broker-name", required=True, help="The broker group.")
@click.option("-i", "--broker-ids", default="",
              help="';'-separated broker ids to forget (default: the whole group).")
@SECRET_OPT
@JSON_OPT
def clean_broker_metadata(controller, broker_name, broker_ids, secret_file, as_json):
    """Forget brokers (or a whole group) in the controller's metadata."""
    try:
        ids = [int(x) for x in broker_ids.replace(",", ";").split(";") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"--broker-ids {broker_ids!r} is not a ';'-list of "
                                 "numbers") from None
    data = _controller_call(controller, lambda c: c.clean_broker_metadata(broker_name, ids),
                            secret_file)
    _emit(data, as_json, lambda d: click.echo(
        f"cleaned {broker_ids or 'the whole group'} of {broker_name}"))


@admin.command("getBrokerEpoch")
@NAMESRV_OPT
@click.option("-b", "--broker-name", required=True, help="The broker group.")
@JSON_OPT
def get_broker_epoch(namesrv, broker_name, as_json):
    """Each broker of the group: its role, max and confirm offset, and its epoch list."""
    from ..client import MQClientError
    from ..client.admin import Admin
    from ..remoting import RemotingError

    async def go():
        async with Admin(namesrv) as a:
            info = await a.cluster_list()
            addrs = info["brokerAddrTable"].get(broker_name, {}).get("brokerAddrs", {})
            if not addrs:
                raise click.ClickException(f"no broker of {broker_name} is registered")
            out = []
            for addr in sorted(set(addrs.values())):
                try:
                    out.append({"address": addr, **await a.broker_epoch(addr)})
                except (MQClientError, RemotingError) as e:
                    out.append({"address": addr, "error": str(e)})
            return out
    data = _aio(go())
    _emit(data, as_json, lambda d: click.echo("\n".join(
        f"{b['address']}: " + (f"ERROR {b['error']}" if "error" in b else
                              f"broker {b['brokerId']} {b['role']} max={b['maxOffset']} "
                              f"confirm={b['confirmOffset']} epochs=" +
                              " ".join(f"{e['epoch']}@{e['startOffset']}" for e in b["epochs"]))
        for b in d)))


@admin.command("endHaRecovery")
@click.option("-b", "--broker", "broker_addr", required=True,
              help="The restarted SYNC_MASTER's address (host:port).")
@SECRET_OPT
@JSON_OPT
def end_ha_recovery(broker_addr, secret_file, as_json):
    """Let a restarted SYNC_MASTER that is refilling its log from its slaves take writes
    now, without them: acknowledged messages only a slave holds are lost (ledgermq's own)."""
    from ..client.instance import tls_context
    from ..runtime.config import ConfigError
    from ..peer_auth.core import PeerAuth, load_secret
    from ..remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
    from ..peer_auth.remoting import PeerGate

    try:
        auth = PeerAuth(load_secret("", secret_file, file_key="--cluster-secret-file"))
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None

    async def go():
        client = RemotingClient(authenticate=PeerGate(auth, "admin").authenticate,
                                ssl_context=tls_context(None))
        try:
            r = await client.invoke(broker_addr, RemotingCommand(RequestCode.END_HA_RECOVERY), 10)
        finally:
            await client.close()
        if r.code != ResponseCode.SUCCESS:
            raise click.ClickException(f"{broker_addr}: {r.remark}")
        return {"broker": broker_addr, "result": r.remark}
    _emit(_aio(go()), as_json, lambda d: click.echo(f"{d['broker']}: {d['result']}"))
