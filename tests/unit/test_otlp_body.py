"""The OTLP receiver's body reading: gzip bodies of several members (RFC 1952) are read whole, within the limit, and
counted in flight piece by piece as they inflate."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ringtrace.collector.ingest.otlp.answers import BadRequest
from ringtrace.collector.ingest.otlp.in_flight import Busy, BytesInFlight
from ringtrace.collector.ingest.otlp.request_body import inflated, read_body


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
    taken: list[int] = []
    read = asyncio.run(read_body(request, limit, taken.append, 30.0))
    assert sum(taken) == len(read)
    return read


def test_a_gzip_body_of_several_members_is_read_whole() -> None:
    assert read(gzip.compress(b"a" * 100) + gzip.compress(b"b" * 100), 1000) == b"a" * 100 + b"b" * 100
    assert read(gzip.compress(b"") + gzip.compress(b"b" * 100), 1000) == b"b" * 100  # an empty member is one
    big = bytes(range(256)) * 10_000  # several pieces of 1 MiB, in members cut anywhere
    assert read(gzip.compress(big[:1000]) + gzip.compress(big[1000:]), len(big)) == big


def test_the_members_together_are_held_to_the_limit() -> None:
    with pytest.raises(BadRequest) as refused:
        read(gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600), 1000)
    assert refused.value.status == 413
    assert read(gzip.compress(b"a" * 500) + gzip.compress(b"b" * 500), 1000) == b"a" * 500 + b"b" * 500


def test_a_second_member_cut_short_is_a_400() -> None:
    with pytest.raises(BadRequest) as refused:
        read(gzip.compress(b"a" * 100) + gzip.compress(b"b" * 100)[:-4], 1000)
    assert refused.value.status == 400


def test_what_a_body_inflates_to_is_taken_piece_by_piece_and_a_refusal_stops_it() -> None:
    in_flight = BytesInFlight(3 * 1024 * 1024)
    bomb = gzip.compress(bytes(8 * 1024 * 1024))
    with in_flight.request() as held:
        held.take(len(bomb))
        with pytest.raises(Busy) as refused:
            inflated(bomb, 8 * 1024 * 1024, held.take)
        assert "in flight" in str(refused.value) and str(3 * 1024 * 1024) in str(refused.value)
        taken = held.held
    assert len(bomb) < taken <= in_flight.most == 3 * 1024 * 1024  # stopped at the bound, 1 MiB a piece
    assert in_flight.peak == taken and in_flight.held == 0  # all given back at the end of the request
    with in_flight.request() as held:
        assert inflated(gzip.compress(b"a" * 100), 1000, held.take) == b"a" * 100
        assert in_flight.held == 100
    assert in_flight.held == 0
