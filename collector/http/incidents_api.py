"""The HTTP API's incidents: ``GET /incidents`` (the pending, saved and failed ones, newest first, filtered),
``GET /incidents/{id}`` (a saved one's snapshot, in any snapshot format or the web view's columns, filtered as a
snapshot is; ``format=record``: any one's record; ``HEAD`` checks it and does no work) and ``DELETE /incidents/{id}``
(a pending one: 409, as its snapshot is).

A pending incident (its ``after`` still runs) is one this collector is capturing (``CollectorAPI.incidents_under_way``)
or, in a fleet, one whose pending record another left in the shared store: listed with when it will be ready
(``ready_wall_ns``), its record served, and its snapshot asked for answered 409 with ``Retry-After`` and the time it
will be ready: a snapshot of a window not yet over would be a different one each time it is asked for, and never the
incident.

Incidents are files (``incidents/incident_files.py``), or with ``--jetstream`` objects of the fleet's bucket
(``incidents/incident_objects.py``, fetched into a local file to be served): they are listed, read and deleted on
worker threads (a bucket that does not answer is a 503 saying why), and a snapshot file is read back as
``ringtrace convert`` reads one (``foreign/offline.py``), then served as a snapshot is (a snapshot slot, a worker
thread, gzip if accepted). Errors are a line of text, as every endpoint's, naming the parameter or the id.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import orjson
from aiohttp import web
from ringtrace.collector.export.formats import Format
from ringtrace.collector.foreign.offline import LoadedFile, load_file
from ringtrace.collector.http.collector_api import COLLECTOR
from ringtrace.collector.http.incident_query import newest_first, parse_incident_query, parse_incidents_query
from ringtrace.collector.http.query import QueryError, accepts_gzip, check_no_params
from ringtrace.collector.http.snapshot_stream import stream_out
from ringtrace.wire.errors import ProtocolError

__all__ = ["add_incident_routes", "incident_snapshot_path", "load_incident"]

log = logging.getLogger("ringtrace.collector.http")

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _error(status: type[web.HTTPException], message: str) -> web.HTTPException:
    """An error answer as every endpoint gives one: a line of text."""
    return status(text=f"{message}\n")


def _parsed(parse: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    try:
        return parse(*args, **kwargs)
    except QueryError as exc:
        raise _error(web.HTTPBadRequest, str(exc)) from None


async def _stored(use: Callable[..., _T], *args: Any) -> _T:
    """``use(*args)``, a method of the incidents' store, on a worker thread; a store that does not answer (the
    fleet's object store, unavailable) is a 503 saying why."""
    try:
        return await asyncio.to_thread(use, *args)
    except OSError as exc:
        log.warning("incidents: %s", exc)
        raise _error(web.HTTPServiceUnavailable, f"the incidents cannot be read now: {exc}") from None


async def incidents(request: web.Request) -> web.Response:
    """The incidents' records that the query selects (those being captured here, and the finished ones), newest
    first: ``{"incidents": [...]}``."""
    query = _parsed(parse_incidents_query, request.query.items(), time.time_ns())
    collector = request.app[COLLECTOR]
    # Those under way first: one that ends while the files are read is then in one list or both (a capture is under
    # way until its record is written), never in neither; its saved record wins.
    # (A pending record in the store is this collector's own, said better by its capture, or another's.)
    under_way = dict(collector.incidents_under_way())
    stored = await _stored(partial(collector.incident_files.records, pending=True))
    records = [under_way.get(r["id"], r) if r.get("status") == "pending" else r for r in stored]
    listed = {record.get("id") for record in records}
    pending = [record for id_, record in under_way.items() if id_ not in listed]
    document = {"incidents": query.select(newest_first([*pending, *records]))}
    return web.Response(body=orjson.dumps(document), content_type="application/json")


async def incident(request: web.Request) -> web.StreamResponse:
    """A saved incident's snapshot in the format asked for (``chrome`` unless ``format`` says another), of the events
    the filters of ``/snapshot`` select (all without one)."""
    collector = request.app[COLLECTOR]
    format_, query = _parsed(parse_incident_query, list(request.query.items()), time.time_ns())
    incident_id = request.match_info["id"]
    if format_ is None:
        return web.Response(body=orjson.dumps(await _record(request, incident_id)), content_type="application/json")
    missing = format_.missing() if format_.missing is not None else None
    if missing is not None:  # (parquet without pyarrow here)
        raise web.HTTPNotImplemented(text=f"{missing}\n")
    path = await incident_snapshot_path(request, incident_id)
    if not collector.begin_snapshot():
        busy = f"max_snapshots={collector.max_snapshots} snapshots are being served; try again shortly\n"
        raise web.HTTPServiceUnavailable(text=busy, headers={"Retry-After": "1"})
    try:
        with collector.metrics.snapshot_seconds.labels(format_.name).time():
            loaded = await load_incident(request, incident_id, path)
            gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
            chunks = format_.chunks(loaded.view, query.filter, query.table, query.columns)
            response, _ = await stream_out(request, loaded.view, chunks, _headers(format_, incident_id, gzip), gzip)
            return response
    finally:
        collector.end_snapshot()


async def incident_head(request: web.Request) -> web.Response:
    """What GET would answer with, but no work: the query and the id are checked, the file is not read."""
    format_, _ = _parsed(parse_incident_query, list(request.query.items()), time.time_ns())
    incident_id = request.match_info["id"]
    if format_ is None:
        await _record(request, incident_id)
        return web.Response(content_type="application/json")
    await incident_snapshot_path(request, incident_id)
    gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    return web.Response(headers=_headers(format_, incident_id, gzip))


async def delete_incident(request: web.Request) -> web.Response:
    """Remove a finished incident (its record and snapshot file; with ``--jetstream``, for every collector):
    ``{"deleted": id}``."""
    _parsed(check_no_params, request.query)
    incident_id = request.match_info["id"]
    collector = request.app[COLLECTOR]
    pending = collector.incidents_under_way().get(incident_id)  # (first: see incidents)
    if not await _stored(collector.incident_files.delete, incident_id):
        pending = pending or await _pending_elsewhere(collector, incident_id)
        if pending is not None:  # (listed, so not unknown: it can be deleted once saved)
            raise _still_capturing(incident_id, _ready_ns(pending), "deleted")
        raise _error(web.HTTPNotFound, f"no incident {incident_id!r:.120}")
    log.info("incident %s deleted (DELETE from %s)", incident_id, request.remote)
    return web.Response(body=orjson.dumps({"deleted": incident_id}), content_type="application/json")


async def _record(request: web.Request, incident_id: str) -> dict[str, Any]:
    """The incident's record: the finished one, or the pending one of a capture under way here; else a 404."""
    collector = request.app[COLLECTOR]
    pending = collector.incidents_under_way().get(incident_id)  # (first: see incidents)
    record = await _stored(partial(collector.incident_files.record, incident_id, pending=True))
    if record is None or (pending is not None and record.get("status") == "pending"):
        record = pending or record
    if record is None:
        raise _error(web.HTTPNotFound, f"no incident {incident_id!r:.120}")
    return record


async def incident_snapshot_path(request: web.Request, incident_id: str) -> Path:
    """The incident's snapshot file; a 409 if it is still being captured (with when it will be ready), a 404 that
    says why there is none (unknown id, or not saved)."""
    collector = request.app[COLLECTOR]
    files = collector.incident_files
    pending = collector.incidents_under_way().get(incident_id)  # (first: see incidents)
    path = await _stored(files.snapshot_path, incident_id)
    if path is not None:
        return path
    if pending is not None:
        raise _still_capturing(incident_id, _ready_ns(pending))
    record = await _stored(partial(files.record, incident_id, pending=True))
    if record is None:
        raise _error(web.HTTPNotFound, f"no incident {incident_id!r:.120}")
    if record.get("status") == "pending":  # (another collector's capture, in a fleet)
        raise _still_capturing(incident_id, _ready_ns(record))
    why = record.get("failure") or "no snapshot file"
    raise _error(web.HTTPNotFound, f"incident {incident_id!r} has no snapshot: it was not saved ({why})")


async def _pending_elsewhere(collector: Any, incident_id: str) -> dict[str, Any] | None:
    """The pending record of ``incident_id`` that another collector left in the shared store; None if none."""
    record: dict[str, Any] | None = await _stored(partial(collector.incident_files.record, incident_id, pending=True))
    return record if record is not None and record.get("status") == "pending" else None


def _ready_ns(pending: dict[str, Any]) -> int:
    """When a pending incident should be saved: what its capture said, else (a record of an older collector) the end
    of its window."""
    ready_ns = pending.get("ready_wall_ns")
    if isinstance(ready_ns, int):
        return ready_ns
    until_ns = pending.get("window", {}).get("until_ns") if isinstance(pending.get("window"), dict) else None
    return until_ns if isinstance(until_ns, int) else time.time_ns()


def _still_capturing(incident_id: str, ready_ns: int, asked: str = "served") -> web.HTTPException:
    """409: the incident's window still runs; ``Retry-After`` is when it should be saved (its end, and a second)."""
    retry_s = max(1, math.ceil((ready_ns - time.time_ns()) / 1e9) + 1)
    ready = datetime.datetime.fromtimestamp(ready_ns / 1e9, datetime.UTC).isoformat(timespec="milliseconds")
    if asked == "served":
        then = "its snapshot is ready about a second later"
        now = "; format=record answers its record now"
    else:
        then, now = f"it can be {asked} once saved, about a second later", ""
    message = (
        f"incident {incident_id!r} is still being captured (pending): its window ends at {ready.replace('+00:00', 'Z')}"
        f"; {then} (retry after {retry_s} s{now})"
    )
    return web.HTTPConflict(text=f"{message}\n", headers={"Retry-After": str(retry_s)})


async def load_incident(request: web.Request, incident_id: str, path: Path) -> LoadedFile:
    """The snapshot file read into a view of its own, on a reader thread."""
    loop = asyncio.get_running_loop()
    try:
        loaded = await loop.run_in_executor(request.app[COLLECTOR].readers, load_file, path)
    except FileNotFoundError:  # deleted meanwhile
        raise _error(web.HTTPNotFound, f"no incident {incident_id!r:.120}") from None
    except (OSError, ProtocolError) as exc:
        log.warning("incident %s: its snapshot file %s cannot be read: %s", incident_id, path, exc)
        message = f"incident {incident_id!r}: its snapshot cannot be read: {exc}"
        raise _error(web.HTTPInternalServerError, message) from None
    if loaded.error is not None:  # served all the same: everything before the damage
        log.warning("incident %s: its snapshot file %s: %s; serving what comes before it", incident_id, path,
                    loaded.error)  # fmt: skip
    return loaded


def _headers(format_: Format, incident_id: str, gzip: bool) -> dict[str, str]:
    suffix = format_.suffix or ".json"
    headers = {
        "Content-Type": format_.content_type,
        "Vary": "Accept-Encoding",
        "Content-Disposition": f'attachment; filename="{incident_id}{suffix}"',
    }
    if gzip:
        headers["Content-Encoding"] = "gzip"
    return headers


def add_incident_routes(app: web.Application) -> None:
    app.router.add_get("/incidents", incidents)
    app.router.add_get("/incidents/{id}", incident, allow_head=False)
    app.router.add_route("HEAD", "/incidents/{id}", incident_head)
    app.router.add_delete("/incidents/{id}", delete_incident)
