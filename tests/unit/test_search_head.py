"""``HEAD /spans`` and ``HEAD /aggregates`` answer as GET would, with no search: the query checked, and the saved
incident it names (``incident``) looked up, as ``HEAD /incidents/ID`` does. Driven in process: the collector's HTTP
app."""

from __future__ import annotations

import asyncio

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from ringtrace.collector.http.api import make_app
from test_collector_limits import small_collector

PATHS = (
    "/spans?incident=nope",
    "/aggregates?incident=nope",
    "/spans?flush_timeout_s=0",
    "/aggregates?by=name&flush_timeout_s=0",
)


def test_head_of_a_search_of_an_unknown_incident_is_a_404_as_its_get() -> None:
    async def scenario() -> dict[tuple[str, str], int]:
        collector = small_collector()
        statuses = {}
        async with TestServer(make_app(collector)) as server, ClientSession() as session:
            for method in ("GET", "HEAD"):
                for path in PATHS:
                    async with session.request(method, server.make_url(path)) as response:
                        statuses[method, path] = response.status
        return statuses

    statuses = asyncio.run(scenario())
    for path in ("/spans?incident=nope", "/aggregates?incident=nope"):
        assert statuses["GET", path] == statuses["HEAD", path] == 404, statuses
    for path in ("/spans?flush_timeout_s=0", "/aggregates?by=name&flush_timeout_s=0"):
        assert statuses["GET", path] == statuses["HEAD", path] == 200, statuses
