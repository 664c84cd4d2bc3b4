"""The HTTP API: thin aiohttp handlers over the store and export, one per endpoint that ``endpoints.py`` lists (what
``GET /`` answers with).

Parameters of a POST come in the query string or as a form body. An unknown, repeated or malformed parameter gets a
400 that names it. Values from a fixed list and yes/no values are taken in any case (``query.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from ringtrace.collector.export import live_tail
from ringtrace.collector.export.chrome import Popping, chrome_trace_chunks
from ringtrace.collector.export.formats import FLAME_GRAPH, FORMATS, TIMELINE, Format
from ringtrace.collector.http.collector_api import COLLECTOR, CollectorAPI
from ringtrace.collector.http.endpoints import ENDPOINTS
from ringtrace.collector.http.incident_post import post_incident
from ringtrace.collector.http.incidents_api import add_incident_routes
from ringtrace.collector.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ringtrace.collector.http.page import page_response, static_file, wants_html
from ringtrace.collector.http.query import (
    POP_PARAMETERS,
    SNAPSHOT_PARAMETERS,
    STREAM_PARAMETERS,
    TIMELINE_PARAMETERS,
    QueryError,
    SnapshotQuery,
    accepts_gzip,
    check_no_params,
    choice,
    parse_process_filter,
    parse_snapshot_query,
    time_text,
)
from ringtrace.collector.http.search_api import add_search_routes
from ringtrace.collector.http.snapshot_stream import stream_out
from ringtrace.collector.read.selection import EventFilter
from ringtrace.collector.read.tail import Tail, TailBehind
from ringtrace.collector.store.processes import ProcessRecord
from ringtrace.wire.message_format import PRIORITIES

__all__ = ["make_app"]

log = logging.getLogger("ringtrace.collector.http")


_MAX_FLUSH_TIMEOUT_S = 60.0
_P = ParamSpec("_P")
_T = TypeVar("_T")


class BadQuery(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(text=message + "\n")


def _parsed(parse: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """What ``parse`` (``query.py``) makes of parameters; a 400 that says why, if it refuses them."""
    try:
        return parse(*args, **kwargs)
    except QueryError as exc:
        raise BadQuery(str(exc)) from None


def _snapshot_query(
    request: web.Request,
    accepted: Mapping[str, str] = SNAPSHOT_PARAMETERS,
    params: Iterable[tuple[str, str]] | None = None,
) -> SnapshotQuery:
    """A snapshot's query from ``params`` (a POST's), else from the request's query string."""
    return _parsed(
        parse_snapshot_query,
        request.query.items() if params is None else params,
        now_ns=time.time_ns(),
        flush_timeout_s=request.app[COLLECTOR].snapshot_flush_timeout_s,
        max_flush_timeout_s=_MAX_FLUSH_TIMEOUT_S,
        accepted=accepted,
    )


def _accepts_gzip(request: web.Request) -> bool:
    return accepts_gzip(request.headers.get("Accept-Encoding", ""))


def _headers(format_: Format, gzip: bool) -> dict[str, str]:
    headers = {"Content-Type": format_.content_type, "Vary": "Accept-Encoding"}
    if format_ is TIMELINE or format_ is FLAME_GRAPH:  # (the web view reads it afresh each time)
        headers["Cache-Control"] = "no-store"
    if gzip:
        headers["Content-Encoding"] = "gzip"
    return headers


def available(format_: Format) -> Format:
    """``format_``, if its writer has what it needs here; else a 501 saying which extra to install."""
    missing = format_.missing() if format_.missing is not None else None
    if missing is not None:
        raise web.HTTPNotImplemented(text=f"{missing}\n")
    return format_


async def snapshot_head(request: web.Request) -> web.Response:
    """What GET would answer with, but no work: the query is checked, nothing is flushed, read or sent."""
    query = _snapshot_query(request)
    return web.Response(headers=_headers(available(FORMATS[query.format]), _accepts_gzip(request)))


async def snapshot(request: web.Request) -> web.StreamResponse:
    query = _snapshot_query(request)
    return await _counted_snapshot(request, query, available(FORMATS[query.format]), _accepts_gzip(request))


async def timeline_head(request: web.Request) -> web.Response:
    """What GET would answer with, but no work, as ``HEAD /snapshot``: no flush, no snapshot slot."""
    _snapshot_query(request, TIMELINE_PARAMETERS)
    return web.Response(headers=_headers(TIMELINE, _accepts_gzip(request)))


async def timeline(request: web.Request) -> web.StreamResponse:
    """The selected events as the web view takes them (``export/timeline_columns.py``): a snapshot in another
    form, served as one (a worker thread, a snapshot slot)."""
    query = _snapshot_query(request, TIMELINE_PARAMETERS)
    return await _counted_snapshot(request, query, TIMELINE, _accepts_gzip(request))


async def flame_graph(request: web.Request) -> web.StreamResponse:
    """The selected samples' stacks merged into one tree, for the web view's flame graph
    (``export/flame_graph.py``): a snapshot in another form, served as one."""
    query = _snapshot_query(request, TIMELINE_PARAMETERS)
    return await _counted_snapshot(request, query, FLAME_GRAPH, _accepts_gzip(request))


async def _counted_snapshot(
    request: web.Request, query: SnapshotQuery, format_: Format, gzip: bool
) -> web.StreamResponse:
    """Serve a snapshot in ``format_`` if a slot is free (each pins segments and takes a worker thread), timed."""
    collector = request.app[COLLECTOR]
    if not collector.begin_snapshot():
        busy = f"max_snapshots={collector.max_snapshots} snapshots are being served; try again shortly\n"
        raise web.HTTPServiceUnavailable(text=busy, headers={"Retry-After": "1"})
    try:
        with collector.metrics.snapshot_seconds.labels(format_.name).time():
            try:
                view = await collector.snapshot(query.flush_timeout_s, query.filter)
            except ConnectionError as exc:  # (--jetstream: the stream cannot be read now)
                raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None
            chunks = format_.chunks(view, query.filter, query.table, query.columns)
            response, _ = await stream_out(request, view, chunks, _headers(format_, gzip), gzip)
            return response
    finally:
        collector.end_snapshot()


async def pop(request: web.Request) -> web.StreamResponse:
    """What the processes selected hold, as Chrome JSON, removed from the store (Gecko's PopMarkers): markers and
    source activity not ended stay for the next pop, which shows them with their ends."""
    collector = request.app[COLLECTOR]
    query = _snapshot_query(request, POP_PARAMETERS, await _post_params(request))
    gzip = _accepts_gzip(request)
    async with collector.pop_lock:  # one at a time: each takes up what the previous one left open
        try:
            view = await collector.pop(query.flush_timeout_s, query.filter)
        except ConnectionError as exc:  # (--jetstream: the stream cannot be reached now)
            raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None
        popping = Popping(collector.pop_left_open)
        chunks = chrome_trace_chunks(view, query.filter, popping)
        response, delivered = await stream_out(request, view, chunks, _headers(FORMATS[query.format], gzip), gzip)
        if delivered and popping.leaves_open is not None:  # (a pop cut off: its reader has none of it)
            collector.keep_pop_left_open(popping.leaves_open)
        return response


async def healthz(request: web.Request) -> web.Response:
    _parsed(check_no_params, request.query)
    return web.json_response(request.app[COLLECTOR].health())


async def readyz(request: web.Request) -> web.Response:
    """Readiness: 200 while the store takes events; 503 with the reason while it cannot (``--jetstream``: no NATS
    server, or the stream cannot store), so that a load balancer sends clients to another collector meanwhile."""
    _parsed(check_no_params, request.query)
    reason = request.app[COLLECTOR].not_ready()
    if reason is None:
        return web.json_response({"status": "ready"})
    return web.json_response({"status": "not ready", "reason": reason}, status=503, headers={"Retry-After": "1"})


async def stats(request: web.Request) -> web.Response:
    _parsed(check_no_params, request.query)
    collector = request.app[COLLECTOR]
    document = collector.stats()
    document.update(await collector.fleet_stats())
    return _json(document)


async def metrics(request: web.Request) -> web.Response:
    _parsed(check_no_params, request.query)
    body = request.app[COLLECTOR].metrics.render()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def sources(request: web.Request) -> web.Response:
    selected, _ = _process_params(request.query.items())
    try:
        return _json(await request.app[COLLECTOR].sources(selected))
    except ConnectionError as exc:  # (--jetstream: the stream cannot be read now)
        raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None


async def set_priority(request: web.Request) -> web.Response:
    extra = {"priority": f"one of {', '.join(PRIORITIES)}", "timeline": "a timeline's name (default: every one)"}
    selected, values = _process_params(await _post_params(request), extra)
    if "priority" not in values:
        raise BadQuery(f"query parameter 'priority' is required: one of {', '.join(PRIORITIES)}")
    priority = _parsed(choice, "priority", values["priority"], PRIORITIES)
    reached = request.app[COLLECTOR].set_priority(selected, priority, values.get("timeline", ""))
    if not reached:
        wanted = " ".join(f"{name}={value}" for name, value in selected.describe().items()) or "(all)"
        raise web.HTTPNotFound(text=f"no connected process matches {wanted}\n")
    return _json({"priority": priority, "processes": [_named(p) for p in reached]})


async def clear(request: web.Request) -> web.Response:
    selected, _ = _process_params(await _post_params(request))
    try:
        processes, removed = await request.app[COLLECTOR].clear(selected)
    except ConnectionError as exc:  # (--jetstream: the stream cannot be reached now)
        raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None
    return _json({"cleared_events": removed, "processes": [_named(p) for p in processes]})


#: How often a live tail looks for new events (Gecko's devtools poll markers every 200 ms).
TAIL_POLL_S = 0.2
#: Something is written at least this often, so that idle tails stay open through proxies, and a gone reader is seen.
TAIL_KEEPALIVE_S = 15.0
#: Live tails at once; more get a 503.
MAX_TAILS = 16
_TAILS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("tails", set)


async def stream(request: web.Request) -> web.StreamResponse:
    """A live tail (``read/tail.py``): each event stored from now on that the filters select, as one Server-Sent Event
    (``data: {json}``); a comment line now and then while nothing comes; a ``cleared`` event with the count of those
    removed on request before it read them; an ``error`` event, then the end, for a reader that fell behind; an
    ``end`` event when the collector stops (``export/live_tail.py``)."""
    collector = request.app[COLLECTOR]
    tail, grace_s = _new_tail(request)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    tails = request.app[_TAILS]
    task = asyncio.current_task()
    assert task is not None
    tails.add(task)
    begun = False
    try:
        await response.prepare(request)
        await collector.tail_step(tail)  # where it begins
        collector.tail_begun()
        begun = True
        await response.write(live_tail.BANNER)
        await _follow(request, response, tail, grace_s)
    except (ConnectionResetError, ConnectionError):
        pass  # the reader left
    except asyncio.CancelledError:  # the collector stops (_end_tails): the reader is told so, not left guessing
        if begun:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(response.write(live_tail.END), 1.0)
        raise
    finally:
        tails.discard(task)
        if begun:
            collector.tail_ended()
    return response


def _new_tail(request: web.Request) -> tuple[Tail, float]:
    """A tail of what the query selects, if there is room for one more; and its grace past ``until``."""
    collector = request.app[COLLECTOR]
    query = _snapshot_query(request, STREAM_PARAMETERS)
    if len(request.app[_TAILS]) >= MAX_TAILS:
        raise web.HTTPServiceUnavailable(
            text=f"max_tails={MAX_TAILS} live tails are open\n", headers={"Retry-After": "5"}
        )
    return Tail(query.filter, collector.stored_limits), query.grace_s


async def _follow(request: web.Request, response: web.StreamResponse, tail: Tail, grace_s: float) -> None:
    """Write what each step of the tail reads, until the reader leaves, falls behind, or does not take it; or, with
    ``until``, once the clock is ``grace_s`` past it (what was recorded before it has been stored by then, as the
    query's ``grace`` says; a client that reconnects later has its events in ``/snapshot``, not the tail) and it has
    read what was stored by then (a step reads a part of a backlog: ``Tail.unread_bytes``)."""
    collector = request.app[COLLECTOR]
    timeout_s = collector.http_guard.timeout_s
    loop = asyncio.get_running_loop()
    written_at = loop.time()
    until_ns = tail.selected.until_ns
    while True:
        await asyncio.sleep(TAIL_POLL_S)
        if request.transport is None or request.transport.is_closing():
            return  # the reader left: its slot is free now, not at the next keepalive
        # (taken before the step, so that the last step reads what was stored by then)
        past_until = until_ns is not None and time.time_ns() > until_ns + int(grace_s * 1e9)
        try:
            rows = await collector.tail_step(tail)
        except TailBehind as exc:
            log.warning("live tail to %s: %s; ending it", request.remote, exc)
            try:
                await asyncio.wait_for(response.write(live_tail.error_event(str(exc))), timeout_s)
            except TimeoutError:  # it does not read at all: cut off as below
                collector.http_guard.cut_off(request.transport)
            return
        payload = live_tail.step_events(rows, tail.take_cleared())
        past_until = past_until and tail.unread_bytes == 0  # (what was stored by then is read: a step reads a part)
        if past_until:
            assert until_ns is not None  # (past_until says so)
            payload += live_tail.done_event(f"its until ({time_text(until_ns)}) has passed", until_ns)
        if not payload:
            if loop.time() - written_at < TAIL_KEEPALIVE_S:
                continue
            payload = live_tail.KEEPALIVE
        try:
            await asyncio.wait_for(response.write(payload), timeout_s)
        except TimeoutError:
            log.warning(
                "live tail to %s: cut off, it did not take %d bytes within %ss", request.remote, len(payload), timeout_s
            )
            collector.http_guard.cut_off(request.transport)
            return
        if past_until:
            return
        written_at = loop.time()


async def _end_tails(app: web.Application) -> None:
    """At shutdown: live tails never end by themselves, and the server would wait for them."""
    tails: set[asyncio.Task[Any]] = app[_TAILS]
    for task in list(tails):
        task.cancel()


async def index(request: web.Request) -> web.Response:
    if wants_html(request.headers.get("Accept", "")):
        return page_response()  # (its query string is the page's own: it reads it)
    _parsed(check_no_params, request.query)
    return _json({"service": "ringtrace collector", "endpoints": ENDPOINTS})


def _json(document: object) -> web.Response:
    return web.Response(body=orjson.dumps(document), content_type="application/json")


def _named(process: ProcessRecord) -> dict[str, Any]:
    return {"pid": process.trace_pid, "os_pid": process.pid, "host": process.host, "process_name": process.name}


def _process_params(
    params: Iterable[tuple[str, str]], extra: Mapping[str, str] | None = None
) -> tuple[EventFilter, dict[str, str]]:
    return _parsed(parse_process_filter, params, extra)


async def _post_params(request: web.Request) -> list[tuple[str, str]]:
    """The query string's parameters, then a form body's."""
    params = list(request.query.items())
    if request.can_read_body:
        if request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data", ""):
            raise web.HTTPUnsupportedMediaType(text=f"parameters come as a form body, not {request.content_type}\n")
        try:
            form = await request.post()
        # Not UTF-8 or a multipart body without its boundary (ValueError), a charset unknown (LookupError), a transfer
        # encoding unknown (RuntimeError) ...
        except (ValueError, LookupError, RuntimeError) as exc:
            raise BadQuery(f"the form body cannot be read: {exc}") from None
        for name, value in form.items():
            if not isinstance(value, str):  # a file: its parameter would be taken as not given (all processes)
                raise BadQuery(f"form field {name!r} is a file; parameters are text")
            params.append((name, value))
    return params


def make_app(collector: CollectorAPI, auth: Middleware | None = None) -> web.Application:
    """The application; ``auth`` checks each request before its handler (``auth.py``)."""
    middlewares = [collector.http_guard.middleware, *([auth] if auth is not None else [])]
    app = web.Application(client_max_size=64 * 1024, middlewares=middlewares)
    app[COLLECTOR] = collector
    app[_TAILS] = set()
    app.on_shutdown.append(_end_tails)
    app.router.add_get("/", index)
    app.router.add_get("/ui/{name}", static_file)
    app.router.add_get("/timeline", timeline, allow_head=False)
    app.router.add_route("HEAD", "/timeline", timeline_head)
    app.router.add_get("/flamegraph", flame_graph, allow_head=False)
    app.router.add_get("/snapshot", snapshot, allow_head=False)
    app.router.add_route("HEAD", "/snapshot", snapshot_head)
    app.router.add_get("/sources", sources)
    app.router.add_get("/stats", stats)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/priority", set_priority)
    app.router.add_post("/clear", clear)
    app.router.add_post("/pop", pop)
    app.router.add_get("/stream", stream)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    add_incident_routes(app)
    app.router.add_post("/incidents", post_incident(collector))
    add_search_routes(app)
    return app
