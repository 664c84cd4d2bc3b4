"""Per-request cost of each HTTP integration: the same requests to a local server with the integration and without,
in one process streaming to a real collector, interleaved round-robin.

Every integration is applied once (``ringtrace.client.integrations.apply``); "without" puts the library's own
function back for the round (the patched function's ``__wrapped__``: for the aiohttp client, ``ClientSession.__init__``,
so that the round's session has no ringtrace ``TraceConfig``), or uses a server made before the integration was
applied. Each row is one integration alone: the other side of its requests is unrecorded.

  requests, httpx (sync), httpx (async), aiohttp client, urllib   GET to an aiohttp server on 127.0.0.1 (unrecorded)
  wsgiref server, aiohttp server, uvicorn server                  GET from urllib (unrecorded)

No target of its own (issue 34's 2% is for a whole program; this says what one request's span adds to the request);
the ratio is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from _common import bench_main, collector, interleave, median, table, wait_connected

_perf = time.perf_counter_ns
_cpu = time.process_time_ns
#: A round's figures: wall ns and process CPU ns (every thread of this process: client, server, ringtrace's) per
#: request.
Figures = tuple[float, float]


@contextlib.contextmanager
def unpatched(owner: Any, name: str, off: bool) -> Iterator[None]:
    """``owner.name`` as the library has it, while ``off``."""
    patched = getattr(owner, name)
    if off:
        setattr(owner, name, patched.__wrapped__)
    try:
        yield
    finally:
        setattr(owner, name, patched)


def loop_in_thread() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return loop


def aiohttp_server(loop: asyncio.AbstractEventLoop) -> int:
    """An aiohttp app serving ``/items`` on ``loop`` (with ringtrace's middleware if the integration is applied)."""
    from aiohttp import web

    async def work(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def start() -> int:
        app = web.Application()
        app.router.add_get("/items", work)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        port: int = sock.getsockname()[1]
        return port

    return asyncio.run_coroutine_threadsafe(start(), loop).result(30)


def uvicorn_server() -> int:
    """A uvicorn server of a plain ASGI app, in a thread (wrapped in ringtrace's middleware if the integration is
    applied)."""
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b'{"ok": true}'
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    port: int = sock.getsockname()[1]
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    return port


def wsgiref_server() -> int:
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_port


def bench(n: int, rounds: int) -> int:
    import ringtrace.client
    from ringtrace.client.integrations import apply

    with collector() as running:
        tl = ringtrace.client.connect(running.tcp, process_name="bench-http")
        if wait_connected(tl) is None:
            print("did not connect to the collector")
            return 1
        import aiohttp
        import httpx
        import requests
        import uvicorn  # noqa: F401  (imported before apply: the servers made before it are unrecorded)

        loop = loop_in_thread()
        plain_aiohttp = aiohttp_server(loop)
        plain_uvicorn = uvicorn_server()
        apply(tl, {"asgi", "wsgi", "aiohttp-server", "requests", "httpx", "aiohttp-client", "urllib"})
        traced_aiohttp, traced_uvicorn = aiohttp_server(loop), uvicorn_server()
        wsgiref_port = wsgiref_server()
        target = f"http://127.0.0.1:{plain_aiohttp}/items"
        urllib_handler = urllib.request.AbstractHTTPHandler
        wsgiref_handler = sys.modules["wsgiref.handlers"].BaseHandler

        def timed(call: Callable[[], object], owner: Any, name: str, off: bool = False) -> Callable[[], Figures]:
            def run() -> Figures:
                with unpatched(owner, name, off):
                    t0, c0 = _perf(), _cpu()
                    for _ in range(n):
                        call()
                    return (_perf() - t0) / n, (_cpu() - c0) / n

            return run

        def get_urllib(url: str) -> Callable[[], object]:
            def call() -> object:
                with urllib.request.urlopen(url, timeout=30) as response:
                    return response.read()

            return call

        def async_timed(owner: Any, name: str, off: bool, session_type: str) -> Callable[[], Figures]:
            async def requests_async() -> Figures:
                if session_type == "httpx":
                    async with httpx.AsyncClient() as async_client:
                        t0, c0 = _perf(), _cpu()
                        for _ in range(n):
                            (await async_client.get(target)).read()
                        return (_perf() - t0) / n, (_cpu() - c0) / n
                async with aiohttp.ClientSession() as aiohttp_session:
                    t0, c0 = _perf(), _cpu()
                    for _ in range(n):
                        async with aiohttp_session.get(target) as response:
                            await response.read()
                    return (_perf() - t0) / n, (_cpu() - c0) / n

            def run() -> Figures:
                with unpatched(owner, name, off):
                    return asyncio.run(requests_async())

            return run

        pairs: dict[str, tuple[Callable[[], Figures], Callable[[], Figures]]] = {}
        # A session and a client for each side: the integration adds its hooks to an httpx client as it first sends.
        sessions, clients = (
            {True: requests.Session(), False: requests.Session()},
            {True: httpx.Client(), False: httpx.Client()},
        )
        pairs["requests"] = tuple(  # type: ignore[assignment]
            timed(lambda s=sessions[off]: s.get(target).content, requests.Session, "send", off) for off in (True, False)
        )
        pairs["httpx (sync)"] = tuple(  # type: ignore[assignment]
            timed(lambda c=clients[off]: c.get(target).read(), httpx.Client, "send", off) for off in (True, False)
        )
        pairs["httpx (async)"] = tuple(  # type: ignore[assignment]
            async_timed(httpx.AsyncClient, "send", off, "httpx") for off in (True, False)
        )
        pairs["aiohttp client"] = tuple(  # type: ignore[assignment]
            async_timed(aiohttp.ClientSession, "__init__", off, "aiohttp") for off in (True, False)
        )
        pairs["urllib"] = (
            timed(get_urllib(target), urllib_handler, "do_open", off=True),
            timed(get_urllib(target), urllib_handler, "do_open"),
        )
        # The servers: urllib as their client, unrecorded.
        wsgiref_url = get_urllib(f"http://127.0.0.1:{wsgiref_port}/items")
        pairs["wsgiref server"] = (
            timed(wsgiref_url, wsgiref_handler, "run", off=True),
            timed(wsgiref_url, wsgiref_handler, "run"),
        )
        for row, (plain, traced) in {
            "aiohttp server": (plain_aiohttp, traced_aiohttp),
            "uvicorn server": (plain_uvicorn, traced_uvicorn),
        }.items():
            pairs[row] = (
                timed(get_urllib(f"http://127.0.0.1:{plain}/items"), urllib_handler, "do_open", off=True),
                timed(get_urllib(f"http://127.0.0.1:{traced}/items"), urllib_handler, "do_open", off=True),
            )
        variants = {f"{row}|off": pair[0] for row, pair in pairs.items()}
        variants |= {f"{row}|on": pair[1] for row, pair in pairs.items()}
        results = interleave(variants, rounds=rounds, warmup=1)
        rows = []
        for row in pairs:
            off, on = results[f"{row}|off"], results[f"{row}|on"]
            wall_off, wall_on = median([w for w, _ in off]), median([w for w, _ in on])
            cpu_off, cpu_on = median([c for _, c in off]), median([c for _, c in on])
            best_off, best_on = min(w for w, _ in off), min(w for w, _ in on)
            rows.append([row, wall_off / 1000, wall_on / 1000, wall_on / wall_off, best_on / best_off,
                         cpu_off / 1000, (cpu_on - cpu_off) / 1000, cpu_on / cpu_off])  # fmt: skip
        headers = ["integration", "wall us without", "with", "x", "x (best rounds)", "CPU us without", "CPU us added",
                   "CPU x"]  # fmt: skip
        print(table(headers, rows, title=f"per request: medians of {rounds} rounds of {n} requests, and best rounds"))
        print(f"events dropped: {tl.dropped_events}")
        for closable in (*sessions.values(), *clients.values()):
            closable.close()
        loop.call_soon_threadsafe(loop.stop)
        tl.close(timeout_s=10)  # before the collector stops
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(bench, __doc__, 50, 41, (20, 1)))
