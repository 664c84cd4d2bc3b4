"""The OTLP receiver's body reading: gzip bodies of several members (RFC 1952) are read whole, within the limit."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ringtrace.collector.ingest.otlp.receiver import BadRequest, read_body


class _Content:
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def iter_chunked(self, size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), size):
            yield self._body[start : start + size]


class _Request:
    content_type = "application/x-protobuf"

    def __init__(self, body: bytes) -> None:
        self.headers = {"Content-Encoding": "gzip"}
        self.content_length = len(body)
        self.content = _Content(body)


def read(body: bytes, limit: int) -> bytes:
    request: Any = _Request(body)
    return asyncio.run(read_body(request, limit))


def test_a_gzip_body_of_several_members_is_read_whole() -> None:
    assert read(gzip.compress(b"a" * 100) + gzip.compress(b"b" * 100), 1000) == b"a" * 100 + b"b" * 100


def test_the_members_together_are_held_to_the_limit() -> None:
    with pytest.raises(BadRequest) as refused:
        read(gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600), 1000)
    assert refused.value.status == 413
    assert read(gzip.compress(b"a" * 500) + gzip.compress(b"b" * 500), 1000) == b"a" * 500 + b"b" * 500


def test_a_second_member_cut_short_is_a_400() -> None:
    with pytest.raises(BadRequest) as refused:
        read(gzip.compress(b"a" * 100) + gzip.compress(b"b" * 100)[:-4], 1000)
    assert refused.value.status == 400
