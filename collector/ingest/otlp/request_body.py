"""An OTLP/HTTP request's body, read within its limit and inflated if gzip (a gzip bomb is refused as it inflates),
each piece it inflates to told before the next is inflated (counted in flight)."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Final

from aiohttp import web
from ringtrace.collector.ingest.otlp.answers import JSON_CONTENT, PROTOBUF_CONTENT, BadRequest

__all__ = ["content_type", "inflated", "read_body"]

#: What a gzip body inflates by at a time, each piece counted in flight before the next.
_INFLATE_STEP: Final = 1024 * 1024


async def read_body(request: web.Request, limit: int, take: Callable[[int], None], timeout_s: float) -> bytes:
    """The request's body, inflated if gzip, within ``limit`` bytes both ways; ``take`` is told of each piece it
    inflates to before the next is inflated (``RequestBytes.take``: it may refuse).

    Raises:
        BadRequest: 413 past the limit; 415 for an encoding other than gzip; 400 for a broken gzip stream, or a body
            cut short by its peer closing the connection (an exporter's timeout: counted, not a traceback logged);
            408 when no part of the body came for ``timeout_s``.
        Busy: ``take`` refused.
    """
    if content_type(request) not in (PROTOBUF_CONTENT, JSON_CONTENT):
        raise BadRequest(
            415, f"Content-Type must be {PROTOBUF_CONTENT} or {JSON_CONTENT}, got {request.content_type!r}"
        )
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("gzip", "identity", ""):
        raise BadRequest(415, f"Content-Encoding must be gzip or identity, got {encoding[:40]!r}")
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(413, f"body of {request.content_length} bytes is past the limit of {limit} bytes")
    body = bytearray()
    chunks = request.content.iter_chunked(64 * 1024)
    try:
        while True:
            async with asyncio.timeout(timeout_s):
                chunk = await anext(chunks, b"")
            if not chunk:
                break
            body += chunk
            if len(body) > limit:
                raise BadRequest(413, f"body past the limit of {limit} bytes")
    except TimeoutError:
        raise BadRequest(408, f"no part of the body for http_timeout_s={timeout_s}, {len(body)} bytes in") from None
    except ConnectionResetError:
        raise BadRequest(400, f"body cut short: the connection closed after {len(body)} bytes of it") from None
    return bytes(body) if encoding != "gzip" else inflated(body, limit, take)


def inflated(body: bytes | bytearray, limit: int, take: Callable[[int], None]) -> bytes:
    """The gzip ``body`` inflated, within ``limit`` bytes, ``take`` told of each piece before the next is inflated.

    Raises:
        BadRequest: 413 past the limit; 400 for a broken gzip stream.
        Busy: ``take`` refused.
    """
    data = bytearray()
    rest: bytes | bytearray = body
    while True:  # each gzip member (RFC 1952: a body may hold several, as gzip.decompress reads them)
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not inflate.eof:
            try:
                piece = inflate.decompress(rest, min(_INFLATE_STEP, limit + 1 - len(data)))
            except zlib.error as exc:
                raise BadRequest(400, f"body is not gzip: {exc}") from None
            if len(data) + len(piece) > limit:
                raise BadRequest(413, f"body inflates past the limit of {limit} bytes")
            if not (piece or inflate.unconsumed_tail or inflate.eof):
                raise BadRequest(400, "gzip body cut short")
            take(len(piece))
            data += piece
            rest = inflate.unconsumed_tail
        rest = inflate.unused_data
        if not rest:
            return bytes(data)


def content_type(request: web.Request) -> str:
    return request.content_type.strip().lower()
