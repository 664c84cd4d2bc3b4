"""The HTTP API: thin aiohttp handlers over the store and export.

GET /                               the endpoints, as JSON
GET /snapshot[?filters]             Chrome trace event JSON of what is stored (opens in Perfetto UI), or a snapshot
                                    file (format=native); ``query.py`` says what it may select; gzip if accepted
HEAD /snapshot[?filters]            the same headers, no work
GET /sources[?pid&process&host]     every process, thread and source, connected or not: what is held, rates, losses
GET /stats                          collector totals
GET /metrics                        Prometheus text format
POST /priority?priority=P[&timeline=T][&pid&process&host]
                                    set connected processes' message priority (SET_PRIORITY)
POST /clear[?pid&process&host]      remove what is stored (of the processes selected), counted as cleared
GET /healthz                        liveness and a few gauges, as JSON

Parameters of a POST come in the query string or as a form body. An unknown, repeated or malformed parameter gets a
400 that names it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

import orjson
from aiohttp import web
from ringtrace.client.messages import PRIORITIES

from .export import SnapshotView, chrome_trace_chunks, native_chunks
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import CollectorMetrics
from .query import EventFilter, QueryError, SnapshotQuery, parse_process_filter, parse_snapshot_query
from .sessions import ProcessRecord

__all__ = ["make_app"]

log = logging.getLogger("ringtrace.collector.http")


class CollectorAPI(Protocol):
    """What the HTTP handlers need of the collector."""

    @property
    def snapshot_flush_timeout_s(self) -> float: ...

    @property
    def metrics(self) -> CollectorMetrics: ...

    snapshots_running: int

    async def snapshot(self, flush_timeout_s: float) -> SnapshotView: ...

    def health(self) -> dict[str, Any]: ...

    def stats(self) -> dict[str, Any]: ...

    async def sources(self, selected: EventFilter) -> list[dict[str, Any]]: ...

    def set_priority(self, selected: EventFilter, priority: str, timeline: str = "") -> list[ProcessRecord]: ...

    def clear(self, selected: EventFilter) -> tuple[list[ProcessRecord], int]: ...


COLLECTOR: web.AppKey[CollectorAPI] = web.AppKey("collector")
_MAX_FLUSH_TIMEOUT_S = 60.0
#: What one step on a worker thread makes before handing it to the event loop (fewer, larger writes).
_PIECE_BYTES = 256 * 1024
_CONTENT_TYPES = {"chrome": "application/json", "native": "application/octet-stream"}
_WRITERS = {"chrome": chrome_trace_chunks, "native": native_chunks}


class BadQuery(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(text=message + "\n")


def _check_params(query: Mapping[str, str], allowed: set[str]) -> None:
    unknown = sorted(set(query) - allowed)
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        raise BadQuery(f"unknown query parameter {unknown[0]!r} (accepted: {accepted})")


def _snapshot_query(request: web.Request) -> SnapshotQuery:
    collector = request.app[COLLECTOR]
    try:
        return parse_snapshot_query(
            request.query.items(),
            now_ns=time.time_ns(),
            flush_timeout_s=collector.snapshot_flush_timeout_s,
            max_flush_timeout_s=_MAX_FLUSH_TIMEOUT_S,
        )
    except QueryError as exc:
        raise BadQuery(str(exc)) from None


def _accepts_gzip(request: web.Request) -> bool:
    """Whether the request's Accept-Encoding takes gzip (or anything: ``*``) with a quality above 0."""
    for item in request.headers.get("Accept-Encoding", "").split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        quality = params.strip().lower().removeprefix("q=")
        try:
            return not params or float(quality) > 0
        except ValueError:
            return False
    return False


def _headers(query: SnapshotQuery, gzip: bool) -> dict[str, str]:
    headers = {"Content-Type": _CONTENT_TYPES[query.format], "Vary": "Accept-Encoding"}
    if gzip:
        headers["Content-Encoding"] = "gzip"
    return headers


async def snapshot_head(request: web.Request) -> web.Response:
    """What GET would answer with, but no work: the query is checked, nothing is flushed, read or sent."""
    query = _snapshot_query(request)
    return web.Response(headers=_headers(query, _accepts_gzip(request)))


async def snapshot(request: web.Request) -> web.StreamResponse:
    collector = request.app[COLLECTOR]
    query = _snapshot_query(request)
    gzip = _accepts_gzip(request)
    collector.snapshots_running += 1
    try:
        with collector.metrics.snapshot_seconds.labels(query.format).time():
            return await _serve_snapshot(request, query, gzip)
    finally:
        collector.snapshots_running -= 1


async def _serve_snapshot(request: web.Request, query: SnapshotQuery, gzip: bool) -> web.StreamResponse:
    view = await request.app[COLLECTOR].snapshot(query.flush_timeout_s)
    step: asyncio.Future[bytes | None] | None = None
    try:
        response = web.StreamResponse(headers=_headers(query, gzip))
        await response.prepare(request)
        # Decoding, encoding and compression run on a worker thread, a piece at a time, so ingest keeps flowing.
        pieces = _Pieces(_WRITERS[query.format](view, query.filter), gzip)
        loop = asyncio.get_running_loop()
        while True:
            step = loop.run_in_executor(None, pieces.next)
            piece = await asyncio.shield(step)  # cancelled, the step still runs: ``finally`` must see it pending
            if piece is None:
                break
            await response.write(piece)
        await response.write_eof()
        return response
    finally:
        # The segments stay pinned until no worker reads them (a cancelled request leaves its step running).
        if step is None or step.done():
            view.frames.close()
        else:
            step.add_done_callback(lambda _: view.frames.close())


class _Pieces:
    """Chunks joined into pieces of about ``_PIECE_BYTES``, gzip-compressed if asked (on the worker thread)."""

    def __init__(self, chunks: Iterator[bytes], gzip: bool) -> None:
        self._chunks = chunks
        self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None
        self._done = False

    def next(self) -> bytes | None:
        if self._done:
            return None
        parts: list[bytes] = []
        size = 0
        while size < _PIECE_BYTES:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._done = True
                break
            parts.append(chunk)
            size += len(chunk)
        piece = b"".join(parts)
        if self._compressor is not None:
            piece = self._compressor.compress(piece) + (self._compressor.flush() if self._done else b"")
        return piece if piece or not self._done else None


async def healthz(request: web.Request) -> web.Response:
    _check_params(request.query, set())
    return web.json_response(request.app[COLLECTOR].health())


async def stats(request: web.Request) -> web.Response:
    _check_params(request.query, set())
    return _json(request.app[COLLECTOR].stats())


async def metrics(request: web.Request) -> web.Response:
    _check_params(request.query, set())
    body = request.app[COLLECTOR].metrics.render()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def sources(request: web.Request) -> web.Response:
    selected, _ = _process_params(request.query.items())
    return _json({"processes": await request.app[COLLECTOR].sources(selected)})


async def set_priority(request: web.Request) -> web.Response:
    extra = {"priority": f"one of {', '.join(PRIORITIES)}", "timeline": "a timeline's name (default: every one)"}
    selected, values = _process_params(await _post_params(request), extra)
    priority = values.get("priority")
    if priority not in PRIORITIES:
        raise BadQuery(f"query parameter 'priority' must be one of {', '.join(PRIORITIES)}, got {priority!r:.80}")
    reached = request.app[COLLECTOR].set_priority(selected, priority, values.get("timeline", ""))
    if not reached:
        wanted = " ".join(f"{name}={value}" for name, value in selected.describe().items()) or "(all)"
        raise web.HTTPNotFound(text=f"no connected process matches {wanted}\n")
    return _json({"priority": priority, "processes": [_named(p) for p in reached]})


async def clear(request: web.Request) -> web.Response:
    selected, _ = _process_params(await _post_params(request))
    processes, removed = request.app[COLLECTOR].clear(selected)
    return _json({"cleared_events": removed, "processes": [_named(p) for p in processes]})


async def index(request: web.Request) -> web.Response:
    _check_params(request.query, set())
    return _json({"service": "ringtrace collector", "endpoints": ENDPOINTS})


#: What ``GET /`` lists.
ENDPOINTS = [
    {"method": "GET", "path": "/snapshot", "does": "the store as Chrome trace JSON, or format=native; filters"},
    {"method": "HEAD", "path": "/snapshot", "does": "checks a snapshot query; no work"},
    {"method": "GET", "path": "/sources", "does": "every process, thread and source: held, rates, losses"},
    {"method": "GET", "path": "/stats", "does": "collector totals"},
    {"method": "GET", "path": "/metrics", "does": "Prometheus text format"},
    {"method": "POST", "path": "/priority", "does": "set message priority: priority=P [timeline, pid, process, host]"},
    {"method": "POST", "path": "/clear", "does": "remove what is stored [pid, process, host]"},
    {"method": "GET", "path": "/healthz", "does": "liveness and gauges"},
]


def _json(document: object) -> web.Response:
    return web.Response(body=orjson.dumps(document), content_type="application/json")


def _named(process: ProcessRecord) -> dict[str, Any]:
    return {"pid": process.trace_pid, "os_pid": process.pid, "host": process.host, "process_name": process.name}


def _process_params(
    params: Iterable[tuple[str, str]], extra: Mapping[str, str] | None = None
) -> tuple[EventFilter, dict[str, str]]:
    try:
        return parse_process_filter(params, extra)
    except QueryError as exc:
        raise BadQuery(str(exc)) from None


async def _post_params(request: web.Request) -> list[tuple[str, str]]:
    """The query string's parameters, then a form body's."""
    params = list(request.query.items())
    if request.can_read_body:
        if request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data", ""):
            raise web.HTTPUnsupportedMediaType(text=f"parameters come as a form body, not {request.content_type}\n")
        form = await request.post()
        params += [(name, value) for name, value in form.items() if isinstance(value, str)]
    return params


def make_app(collector: CollectorAPI) -> web.Application:
    app = web.Application(client_max_size=64 * 1024)
    app[COLLECTOR] = collector
    app.router.add_get("/", index)
    app.router.add_get("/snapshot", snapshot, allow_head=False)
    app.router.add_route("HEAD", "/snapshot", snapshot_head)
    app.router.add_get("/sources", sources)
    app.router.add_get("/stats", stats)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/priority", set_priority)
    app.router.add_post("/clear", clear)
    app.router.add_get("/healthz", healthz)
    return app
