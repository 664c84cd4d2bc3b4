"""The HTTP API's search: ``GET /spans`` (the slowest or newest spans a filter selects) and ``GET /aggregates``
(span durations per name and/or process, instants and messages counted), as JSON (``read/span_search.py``,
``read/span_aggregates.py``; parameters ``search_query.py``).

Each is served as a snapshot is: a snapshot slot (all taken: 503 with Retry-After, as ``/snapshot``), a flush round
trip with the connected clients, then the walk on a reader thread, the event loop free meanwhile. With ``incident``,
the walk is of that saved incident's snapshot file, read back as ``GET /incidents/{id}`` reads it (no flush; an
unknown id a 404, one still being captured a 409). A refused parameter gets a 400 that names it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from ringtrace.collector.http.collector_api import COLLECTOR
from ringtrace.collector.http.incidents_api import incident_snapshot_path, load_incident
from ringtrace.collector.http.query import QueryError
from ringtrace.collector.http.search_query import SearchQuery, parse_search_query
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.span_aggregates import aggregate_spans
from ringtrace.collector.read.span_search import search_spans

__all__ = ["add_search_routes"]

#: The longest flush timeout a query may ask for (as ``/snapshot``'s).
_MAX_FLUSH_TIMEOUT_S = 60.0


def _query(request: web.Request, aggregates: bool) -> SearchQuery:
    try:
        return parse_search_query(
            request.query.items(),
            now_ns=time.time_ns(),
            aggregates=aggregates,
            flush_timeout_s=request.app[COLLECTOR].snapshot_flush_timeout_s,
            max_flush_timeout_s=_MAX_FLUSH_TIMEOUT_S,
        )
    except QueryError as exc:
        raise web.HTTPBadRequest(text=f"{exc}\n") from None


async def spans(request: web.Request) -> web.Response:
    """``{"spans": [...], "lost": {...}, "lost_by_forgotten_processes": {...}}``: the ``limit`` spans first in
    ``sort`` order."""
    query = _query(request, aggregates=False)

    def search(view: SnapshotView) -> dict[str, Any]:
        return search_spans(view, query.filter, query.spans, query.sort, query.limit)

    return await _searched(request, query, "spans", search)


async def aggregates(request: web.Request) -> web.Response:
    """``{"rows": [...], "instants": N, "messages": {...}, "lost": {...}, ...}`` grouped ``by`` name and/or process."""
    query = _query(request, aggregates=True)

    def search(view: SnapshotView) -> dict[str, Any]:
        return aggregate_spans(view, query.filter, query.spans, query.by)

    return await _searched(request, query, "aggregates", search)


async def _searched(
    request: web.Request, query: SearchQuery, what: str, search: Callable[[SnapshotView], dict[str, Any]]
) -> web.Response:
    """``search`` of a snapshot, on a reader thread, in a snapshot slot (timed as a snapshot of format ``what``)."""
    collector = request.app[COLLECTOR]
    # An incident's: its snapshot file, checked before a slot is taken (unknown: 404; still being captured: 409).
    path = None if query.incident is None else await incident_snapshot_path(request, query.incident)
    if not collector.begin_snapshot():
        busy = f"max_snapshots={collector.max_snapshots} snapshots are being served; try again shortly\n"
        raise web.HTTPServiceUnavailable(text=busy, headers={"Retry-After": "1"})
    try:
        with collector.metrics.snapshot_seconds.labels(what).time():
            if query.incident is not None and path is not None:
                view = (await load_incident(request, query.incident, path)).view
            else:
                try:
                    view = await collector.snapshot(query.flush_timeout_s, query.filter)
                except ConnectionError as exc:  # (--jetstream: the stream cannot be read now)
                    raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "1"}) from None
            future = asyncio.get_running_loop().run_in_executor(collector.readers, lambda: search(view))
            try:
                document = await asyncio.shield(future)  # (cancelled, the walk goes on)
            finally:  # its segments let go of once the walk ends, however it ends, on the store's thread (this one)
                if future.done():
                    view.frames.close()
                else:
                    future.add_done_callback(lambda _: view.frames.close())
    finally:
        collector.end_snapshot()
    return web.Response(body=orjson.dumps(document), content_type="application/json",
                        headers={"Cache-Control": "no-store"})  # fmt: skip


async def spans_head(request: web.Request) -> web.Response:
    """What GET would answer with, but no work (as ``HEAD /snapshot``): the query is checked, nothing searched; the
    incident it names looked up (as ``HEAD /incidents/ID``: unknown, a 404; still being captured, a 409)."""
    return await _head(request, _query(request, aggregates=False))


async def aggregates_head(request: web.Request) -> web.Response:
    """As ``spans_head``, for ``/aggregates``."""
    return await _head(request, _query(request, aggregates=True))


async def _head(request: web.Request, query: SearchQuery) -> web.Response:
    if query.incident is not None:
        await incident_snapshot_path(request, query.incident)
    return web.Response(content_type="application/json", headers={"Cache-Control": "no-store"})


def add_search_routes(app: web.Application) -> None:
    app.router.add_get("/spans", spans, allow_head=False)
    app.router.add_route("HEAD", "/spans", spans_head)
    app.router.add_get("/aggregates", aggregates, allow_head=False)
    app.router.add_route("HEAD", "/aggregates", aggregates_head)
