"""The incidents' webhook (``incidents/webhook.py``) against a real local HTTP server that answers, is slow, is down
(a refused port), or answers 500 before 200: what ``notify`` returns, and that it never raises."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from ringtrace.collector.incidents.webhook import DELIVERED, WebhookOutcome, notify

RECORD = {"id": "20261129T104501000Z-slow-checkout-3f9a", "rule": "slow checkout", "status": "saved"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serving(handler: Handler, call: Callable[[str], Awaitable[Any]]) -> Any:
    """``call(url)`` while a server on 127.0.0.1 (port 0) answers POST / with ``handler``."""
    app = web.Application()
    app.router.add_post("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        return await call(f"http://127.0.0.1:{port}/")
    finally:
        await runner.cleanup()


def run(handler: Handler, **options: Any) -> WebhookOutcome:
    async def main() -> WebhookOutcome:
        async with aiohttp.ClientSession() as session:
            outcome: WebhookOutcome = await serving(handler, lambda url: notify(session, url, RECORD, **options))
            return outcome

    return asyncio.run(main())


def test_a_record_is_posted_as_json() -> None:
    received: list[Any] = []

    async def handler(request: web.Request) -> web.Response:
        received.append((request.content_type, await request.json()))
        return web.Response(status=204)

    assert run(handler) == (DELIVERED, 1)
    assert received == [("application/json", RECORD)]


def test_500_then_200_is_delivered_on_a_retry() -> None:
    answers = [500, 200]

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=answers.pop(0))

    assert run(handler, backoff_s=0.01) == (DELIVERED, 2)
    assert answers == []


def test_500_every_time_fails_after_the_attempts_naming_the_status() -> None:
    calls = []

    async def handler(request: web.Request) -> web.Response:
        calls.append(1)
        return web.Response(status=500)

    outcome = run(handler, attempts=3, backoff_s=0.01)
    assert outcome == ("failed: HTTP 500 Internal Server Error (3 attempts)", 3)
    assert len(calls) == 3


def test_a_client_error_is_not_retried() -> None:
    calls = []

    async def handler(request: web.Request) -> web.Response:
        calls.append(1)
        return web.Response(status=404)

    assert run(handler, attempts=3, backoff_s=0.01) == ("failed: HTTP 404 Not Found (1 attempt)", 1)
    assert len(calls) == 1


def test_a_slow_server_is_given_up_on_after_the_timeout() -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)  # the server being slow (5 times the timeout), not the test waiting
        return web.Response()

    outcome = run(handler, timeout_s=0.2, attempts=2, backoff_s=0.01)
    assert outcome == ("failed: no answer within 0.2s (2 attempts)", 2)


def test_a_server_that_is_down_fails_naming_the_error() -> None:
    with socket.socket() as sock:  # a port just freed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def main() -> WebhookOutcome:
        async with aiohttp.ClientSession() as session:
            return await notify(session, f"http://127.0.0.1:{port}/", RECORD, attempts=2, backoff_s=0.01)

    outcome, attempts = asyncio.run(main())
    assert attempts == 2
    assert outcome.startswith("failed: ClientConnectorError") and outcome.endswith("(2 attempts)"), outcome


def test_a_bad_url_fails_without_raising() -> None:
    async def main() -> WebhookOutcome:
        async with aiohttp.ClientSession() as session:
            return await notify(session, "not a url", RECORD, backoff_s=0.01)

    outcome, attempts = asyncio.run(main())
    assert attempts == 1
    assert outcome.startswith("failed: ") and outcome.endswith("(1 attempt)"), outcome
