"""The HTTP API: thin aiohttp handlers over the store and export.

GET /snapshot[?filters]             Chrome trace event JSON of what is stored (opens in Perfetto UI), a snapshot
                                    file (format=native), or a Perfetto protobuf trace (format=perfetto);
                                    ``query.py`` says what it may select; gzip if accepted
HEAD /snapshot[?filters]            the same headers, no work
GET /healthz                        liveness and a few gauges, as JSON
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from aiohttp import web

from .export import chrome_trace_chunks, native_chunks
from .perfetto import perfetto_chunks
from .query import QueryError, SnapshotQuery, parse_snapshot_query
from .walk import SnapshotView

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
#: What one step on a worker thread makes before handing it to the event loop (fewer, larger writes).
_PIECE_BYTES = 256 * 1024
_CONTENT_TYPES = {
    "chrome": "application/json",
    "native": "application/octet-stream",
    "perfetto": "application/octet-stream",
}
_WRITERS = {"chrome": chrome_trace_chunks, "native": native_chunks, "perfetto": perfetto_chunks}


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
    view = await collector.snapshot(query.flush_timeout_s)
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


def make_app(collector: CollectorAPI) -> web.Application:
    app = web.Application()
    app[COLLECTOR] = collector
    app.router.add_get("/snapshot", snapshot, allow_head=False)
    app.router.add_route("HEAD", "/snapshot", snapshot_head)
    app.router.add_get("/healthz", healthz)
    return app
