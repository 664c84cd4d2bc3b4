"""A snapshot written out to an HTTP response: made on a worker thread a piece at a time (gzip-compressed if asked),
written as its reader takes it, cut off if it takes nothing for too long; the view it reads stays pinned until no
worker reads it. ``GET /snapshot``, ``POST /pop`` and ``GET /incidents/{id}`` serve what they make through it."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Iterator

from aiohttp import web
from ringtrace.collector.http.collector_api import COLLECTOR
from ringtrace.collector.http.guard import reset
from ringtrace.collector.read.frame_walk import SnapshotView

__all__ = ["Pieces", "stream_out"]

log = logging.getLogger("ringtrace.collector.http")

#: What one step on a reader thread makes before handing it to the event loop (fewer, larger writes), or for how
#: long it runs at most.
_PIECE_BYTES = 256 * 1024
_PIECE_S = 0.05


async def stream_out(
    request: web.Request, view: SnapshotView, chunks: Iterator[bytes], headers: dict[str, str], gzip: bool
) -> tuple[web.StreamResponse, bool]:
    """Write ``chunks`` out, made on a worker thread; ``view``'s segments stay pinned until no worker reads them.
    Returns the response, and whether it was written whole (not cut off: its reader took nothing for too long, or
    making it failed)."""
    step: asyncio.Future[bytes | None] | None = None
    response = web.StreamResponse(headers=headers)
    written = 0
    try:
        await response.prepare(request)
        # Decoding, encoding and compression run on a worker thread, a piece at a time, so ingest keeps flowing.
        pieces = Pieces(chunks, gzip)
        loop = asyncio.get_running_loop()
        timeout_s = request.app[COLLECTOR].http_guard.timeout_s
        while True:
            step = loop.run_in_executor(request.app[COLLECTOR].readers, pieces.next)
            try:
                piece = await asyncio.shield(step)  # cancelled, the step still runs: ``finally`` must see it pending
            except Exception:  # the status (200) is sent: a response ended cleanly now would pass for a whole one
                log.exception("snapshot to %s: failed after %d bytes; its connection is reset, so that the reader "
                              "sees it cut off", request.remote, written)  # fmt: skip
                reset(request.transport)
                return response, False
            if piece is None:
                break
            written += len(piece)
            try:
                await asyncio.wait_for(response.write(piece), timeout_s)
            except TimeoutError:  # it would hold its snapshot slot (and the segments it pins) for as long
                log.warning("snapshot to %s: cut off, it did not take %d bytes within %ss", request.remote,
                            len(piece), timeout_s)  # fmt: skip
                request.app[COLLECTOR].http_guard.cut_off(request.transport)
                return response, False
        await response.write_eof()
        return response, True
    except ConnectionError:  # its reader went away (a reset, a closed tab): not the collector's fault, no traceback
        log.info("snapshot to %s: its reader went away after %d bytes", request.remote, written)
        return response, False
    finally:
        # The segments stay pinned until no worker reads them (a cancelled request leaves its step running).
        if step is None or step.done():
            view.frames.close()
        else:
            step.add_done_callback(lambda _: view.frames.close())


class Pieces:
    """Chunks joined into pieces of about ``_PIECE_BYTES``, or what ``_PIECE_S`` made, gzip-compressed if asked (on
    a reader thread: the time bound lets the other snapshots and pops waiting for one take their turns)."""

    def __init__(self, chunks: Iterator[bytes], gzip: bool) -> None:
        self._chunks = chunks
        self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None
        self._done = False

    def next(self) -> bytes | None:
        if self._done:
            return None
        parts: list[bytes] = []
        size = 0
        until = time.monotonic() + _PIECE_S
        while size < _PIECE_BYTES and time.monotonic() < until:
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
