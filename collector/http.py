"""The HTTP API: thin aiohttp handlers over the store and export.

GET /snapshot[?flush_timeout_s=S]   Chrome trace event JSON of everything stored (opens in Perfetto UI)
GET /healthz                        liveness and a few gauges, as JSON
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from .export import SnapshotView, chrome_trace_chunks

__all__ = ["make_app"]

log = logging.getLogger("ringtrace.collector.http")


class CollectorAPI(Protocol):
    """What the HTTP handlers need of the collector."""

    @property
    def snapshot_flush_timeout_s(self) -> float: ...

    async def snapshot(self, flush_timeout_s: float) -> SnapshotView: ...

    def health(self) -> dict[str, Any]: ...


COLLECTOR: web.AppKey[CollectorAPI] = web.AppKey("collector")
_MAX_FLUSH_TIMEOUT_S = 60.0


class BadQuery(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(text=message + "\n")


def _check_params(query: Mapping[str, str], allowed: set[str]) -> None:
    unknown = sorted(set(query) - allowed)
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        raise BadQuery(f"unknown query parameter {unknown[0]!r} (accepted: {accepted})")


def _float_param(query: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadQuery(f"query parameter {name!r} must be a number, got {text!r}") from None
    if not low <= value <= high:  # also refuses nan
        raise BadQuery(f"query parameter {name!r} must be between {low} and {high}, got {text!r}")
    return value


async def snapshot(request: web.Request) -> web.StreamResponse:
    collector = request.app[COLLECTOR]
    _check_params(request.query, {"flush_timeout_s"})
    flush_timeout_s = _float_param(
        request.query, "flush_timeout_s", collector.snapshot_flush_timeout_s, 0.0, _MAX_FLUSH_TIMEOUT_S
    )
    view = await collector.snapshot(flush_timeout_s)
    step: asyncio.Future[bytes | None] | None = None
    try:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        # Decoding and JSON encoding run on a worker thread, one frame per step, so ingest keeps flowing.
        chunks = chrome_trace_chunks(view)
        loop = asyncio.get_running_loop()
        while True:
            step = loop.run_in_executor(None, next, chunks, None)
            chunk = await asyncio.shield(step)  # cancelled, the step still runs: ``finally`` must see it pending
            if chunk is None:
                break
            await response.write(chunk)
        await response.write_eof()
        return response
    finally:
        # The segments stay pinned until no worker reads them (a cancelled request leaves its step running).
        if step is None or step.done():
            view.frames.close()
        else:
            step.add_done_callback(lambda _: view.frames.close())


async def healthz(request: web.Request) -> web.Response:
    _check_params(request.query, set())
    return web.json_response(request.app[COLLECTOR].health())


def make_app(collector: CollectorAPI) -> web.Application:
    app = web.Application()
    app[COLLECTOR] = collector
    app.router.add_get("/snapshot", snapshot)
    app.router.add_get("/healthz", healthz)
    return app
