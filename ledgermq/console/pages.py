"""The console's routes: one handler per page or action. Handlers read through the views
(admin API), render a template, and turn a bad form into a 400 and a cluster that does
not answer into a 502, each page saying what went wrong."""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

from aiohttp import web

from ..client.instance import MQClientError
from ..remoting import RemotingError
from ..runtime.clock import wall_ms
from . import views

routes = web.RouteTableDef()


class BadInput(ValueError):
    """A form field the console cannot use; the message says which and why."""


def fmt_time(ms) -> str:
    if ms is None or int(ms) <= 0:
        return "-"
    return datetime.fromtimestamp(int(ms) / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_bytes(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


FILTERS = {"time": fmt_time, "bytes": fmt_bytes}


def render(request: web.Request, template: str, status: int = 200, **ctx) -> web.Response:
    console = request.app["console"]
    html = console.templates.get_template(template).render(
        namesrv=console.namesrv, path=request.path, csrf=console.access.csrf, **ctx)
    return web.Response(text=html, status=status, content_type="text/html")


@web.middleware
async def errors(request: web.Request, handler):
    try:
        return await handler(request)
    except BadInput as e:
        return render(request, "error.html", 400, title="Bad input", message=str(e))
    except (MQClientError, RemotingError, OSError) as e:
        return render(request, "error.html", 502, title="The cluster answered with an error",
                      message=str(e))


def _admin(request: web.Request):
    return request.app["console"].admin


def _int(form, key: str, lo: int, hi: int, default: int | None = None) -> int:
    raw = str(form.get(key, "")).strip()
    if not raw and default is not None:
        return default
    if not raw.lstrip("-").isdigit() or not lo <= int(raw) <= hi:
        raise BadInput(f"{key}: expected a whole number in {lo}..{hi}, got {raw!r}")
    return int(raw)


def _text(form, key: str) -> str:
    value = str(form.get(key, "")).strip()
    if not value:
        raise BadInput(f"{key} is required")
    return value


def _when(form) -> int:
    """A reset/search time: 'earliest' (0), 'latest' (-1), epoch ms, or the browser's
    datetime-local value (read as UTC, as the pages show times)."""
    raw = str(form.get("time", "")).strip()
    if raw in ("earliest", "latest", "now"):
        return {"earliest": 0, "latest": -1, "now": wall_ms()}[raw]
    if raw.isdigit():
        return int(raw)
    try:
        return int(datetime.fromisoformat(raw).replace(tzinfo=timezone.utc).timestamp() * 1000)
    except ValueError:
        raise BadInput(f"time: expected earliest, latest, epoch ms or YYYY-MM-DDTHH:MM[:SS] "
                       f"(UTC), got {raw!r}") from None


# ---- pages ---------------------------------------------------------------------------
@routes.get("/")
async def cluster(request: web.Request) -> web.Response:
    return render(request, "cluster.html", rows=await views.cluster_view(_admin(request)))


@routes.get("/topics")
async def topics(request: web.Request) -> web.Response:
    system = request.query.get("system") == "1"
    console = request.app["console"]
    rows = await views.topics_view(console.admin, console.rates, system)
    clusters = sorted((await console.admin.cluster_list())["clusterAddrTable"])
    return render(request, "topics.html", rows=rows, system=system, clusters=clusters,
                  deleted=request.query.get("deleted"))


@routes.post("/topics")
async def update_topic(request: web.Request) -> web.Response:
    form = await request.post()
    topic = _text(form, "topic")
    queues = _int(form, "queues", 1, 1024, 8)
    perm = _int(form, "perm", 2, 6, 6)
    if perm not in (2, 4, 6):
        raise BadInput(f"perm: expected 2 (write), 4 (read) or 6 (read and write), got {perm}")
    await _admin(request).update_topic(topic, cluster=str(form.get("cluster") or "") or None,
                                       read_queues=queues, write_queues=queues, perm=perm,
                                       order=form.get("order") == "on")
    raise web.HTTPSeeOther(f"/topics/{topic}?updated=1")


@routes.get("/topics/{topic}")
async def topic(request: web.Request) -> web.Response:
    console, name = request.app["console"], request.match_info["topic"]
    view = await views.topic_view(console.admin, console.rates, name)
    return render(request, "topic.html", t=view, updated=request.query.get("updated"),
                  now=wall_ms())


@routes.post("/topics/{topic}/delete")
async def delete_topic(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    await _admin(request).delete_topic(name)
    raise web.HTTPSeeOther(f"/topics?deleted={name}")


@routes.get("/groups")
async def groups(request: web.Request) -> web.Response:
    system = request.query.get("system") == "1"
    rows = await views.groups_view(_admin(request), system)
    return render(request, "groups.html", rows=rows, system=system)


@routes.get("/groups/{group}")
async def group(request: web.Request) -> web.Response:
    view = await views.group_view(_admin(request), request.match_info["group"])
    return render(request, "group.html", g=view, reset=request.query.get("reset"))


@routes.post("/groups/{group}/reset")
async def reset_offset(request: web.Request) -> web.Response:
    name, form = request.match_info["group"], await request.post()
    topic, when = _text(form, "topic"), _when(form)
    rows = await _admin(request).reset_offset(name, topic, when, force=True)
    raise web.HTTPSeeOther(f"/groups/{name}?reset={topic}:{len(rows)}")


@routes.get("/messages")
async def messages(request: web.Request) -> web.Response:
    """Search by key (topic + key), by id (either id), or by queue and time."""
    q, admin = request.query, _admin(request)
    by, found, searched = q.get("by", ""), [], False
    if by == "key":
        found, searched = await admin.query_msg_by_key(_text(q, "topic"), _text(q, "key")), True
    elif by == "id":
        found = [await _by_id(admin, _text(q, "id"), q.get("topic") or None)]
        searched = True
    elif by == "time":
        found = await admin.messages_by_time(_text(q, "topic"), _text(q, "broker"),
                                             _int(q, "queue", 0, 65535), _when(q),
                                             _int(q, "count", 1, 256, 16))
        searched = True
    elif by:
        raise BadInput(f"by: expected key, id or time, got {by!r}")
    rows = [views.message_row(m) for m in found if m is not None]
    return render(request, "messages.html", rows=rows, q=dict(q), by=by, searched=searched)


async def _by_id(admin, msg_id: str, topic: str | None):
    try:
        return await admin.query_msg_by_id(msg_id, topic)
    except ValueError:
        raise BadInput(f"id: {msg_id!r} is not a message id (32 hex digits)") from None
    except MQClientError:
        return None  # not found: the page says no message matched


@routes.get("/replicas")
async def replicas(request: web.Request) -> web.Response:
    watcher = request.app["console"].watcher
    if not watcher.polled.is_set():  # the first look waits for the first poll (bounded)
        try:
            await asyncio.wait_for(watcher.polled.wait(), 5)
        except asyncio.TimeoutError:
            pass
    return render(request, "replicas.html", v=watcher.view())


@routes.get("/api/replicas")
async def replicas_json(request: web.Request) -> web.Response:
    return web.Response(text=views.dumps(request.app["console"].watcher.view()),
                        content_type="application/json")


@routes.get("/replicas/fragment")
async def replicas_fragment(request: web.Request) -> web.Response:
    """The groups and elections tables alone: the page's script swaps them in live."""
    return render(request, "replica_groups.html", v=request.app["console"].watcher.view())
