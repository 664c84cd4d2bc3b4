"""An aiohttp request's server span, begun and ended (``integrations/aiohttp_server.py``): the C twins
(``speedups.begin_server_span`` and ``end_server_span``, one call each) against the pure-Python ones
(``begin_in_python`` and ``end_in_python``, with the span of a trace opened and closed by ``trace_context``'s
``open_span_in_python`` and ``close_span_in_python``: the whole path in Python, as before the C twins), in one
process, the rounds interleaved: ns a request, and the ratio. And a plain ``Timeline.scope`` beside them, the floor of
any span.

Each twin begins and ends the span of a real aiohttp request (``aiohttp.test_utils.make_mocked_request``, its route
matched by the application's router, as ``_handle`` leaves it) answered 200, on a timeline whose listener keeps
nothing; the timeline is drained every 500 requests outside the timing, as the flusher drains a server's buffer
every 50 ms at 10,000 requests a second (keeping every span of a round would time the allocator and the garbage
collector growing the heap instead).

    python benchmarks/bench_server_span_twins.py [--n REQUESTS] [--rounds N] [--quick]
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

from _common import ParkedListener, bench_main, interleave, median, table
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from ringtrace.client import Timeline
from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.integrations import aiohttp_server
from ringtrace.client.recording import trace_context

#: Requests between drains (the flusher's 50 ms at 10,000 requests a second).
BETWEEN_DRAINS = 500


async def _prices(request: web.Request) -> web.Response:
    return web.Response(text="[]")


def matched_request() -> Any:
    """A GET /prices of an application that routes it, its route matched (``request.match_info`` set)."""
    app = web.Application()
    app.router.add_get("/prices", _prices)
    request = make_mocked_request("GET", "/prices?n=20", app=app)
    match_info = asyncio.run(app.router.resolve(request))
    match_info.add_app(app)
    request._match_info = match_info
    return request


def bench(n: int, rounds: int) -> int:
    if speedups is None:
        print("the C accelerator is not built here (or RINGTRACE_PURE_PYTHON=1): nothing to compare", file=sys.stderr)
        return 1
    tl = Timeline("server-span-twins", listeners=[ParkedListener()], max_buffered_events=2 * BETWEEN_DRAINS)
    FLUSHER.unregister(tl)
    spans = aiohttp_server._spans_of(tl)
    request, response = matched_request(), web.Response(text="[]")
    batches = max(1, n // BETWEEN_DRAINS)

    def timed(one: Callable[[], None]) -> Callable[[], float]:
        def run() -> float:
            spent = 0
            for _ in range(batches):
                started = time.perf_counter_ns()
                for _ in repeat(None, BETWEEN_DRAINS):
                    one()
                spent += time.perf_counter_ns() - started
                tl.drain()
            return spent / (batches * BETWEEN_DRAINS)

        return run

    def twin(begin: Callable[..., Any], end: Callable[..., None]) -> Callable[[], None]:
        def one() -> None:
            end(spans, begin(spans, request), request, response, None)

        return one

    def plain() -> None:
        with tl.scope("GET /prices"):
            pass

    python_round = timed(twin(aiohttp_server.begin_in_python, aiohttp_server.end_in_python))
    c = twin(speedups.begin_server_span, speedups.end_server_span)
    c()
    assert list(spans.named.values()) == [("GET /prices", "/prices")]  # (its route matched, its label kept)

    def all_in_python() -> float:
        """A round of the Python twins, the span of a trace opened and closed in Python too."""
        opened, closed = aiohttp_server.open_span, aiohttp_server.close_span
        aiohttp_server.open_span = trace_context.open_span_in_python
        aiohttp_server.close_span = trace_context.close_span_in_python
        try:
            return python_round()
        finally:
            aiohttp_server.open_span, aiohttp_server.close_span = opened, closed

    results = interleave({"python": all_in_python, "c": timed(c), "plain scope": timed(plain)}, rounds)
    tl.close()
    base = median(results["python"])
    rows = [[name, f"{median(values):,.0f}", f"{median(values) / base:.3f}"] for name, values in results.items()]
    title = f"An aiohttp request's server span begun and ended, {batches * BETWEEN_DRAINS:,} a round, {rounds} rounds"
    print(table(["twin", "ns a request", "x python"], rows, title))
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 50_000, 9, (5_000, 3)))
