"""``aiohttp_app.py``'s server with the recording of its requests chosen by the second argument, for
``bench_server_span.py``: ``none`` (not connected), ``idle`` (connected, no middleware), ``noop`` (connected, a
middleware that records nothing: what aiohttp's middleware chain costs), ``scope`` (a middleware recording a plain
scope per request), ``span`` (the aiohttp-server integration as ``ringtrace run`` applies it: a server span per
request around the application's ``_handle``, no middleware). The collector's address is the third argument. Prints
``listening`` once it serves."""

from __future__ import annotations

import sys
from typing import Any

from aiohttp import web
from aiohttp_app import as_a_server_that_has_run_a_while, prices
from ringtrace.client.connecting import connect
from ringtrace.client.integrations.aiohttp_server import install


@web.middleware
async def noop(request: Any, handler: Any) -> Any:
    return await handler(request)


def plain_scope(timeline: Any) -> Any:
    @web.middleware
    async def scoped(request: Any, handler: Any) -> Any:
        with timeline.scope(request.path):
            return await handler(request)

    return scoped


def application(variant: str, address: str) -> web.Application:
    """The server's application, recording its requests as ``variant`` says (see the module's docstring)."""
    middlewares: list[Any] = []
    if variant != "none":
        timeline = connect(address, process_name="bench-server")
        if variant == "noop":
            middlewares.append(noop)
        elif variant == "scope":
            middlewares.append(plain_scope(timeline))
        elif variant == "span":
            install(timeline)
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/prices", prices)
    return app


def main() -> None:
    as_a_server_that_has_run_a_while()
    port, variant = int(sys.argv[1]), sys.argv[2]
    app = application(variant, sys.argv[3] if variant != "none" else "")
    web.run_app(app, host="127.0.0.1", port=port, print=lambda *_: print("listening", flush=True), access_log=None)


if __name__ == "__main__":
    main()
