"""HTTP servers and clients with no ringtrace call in them (``test_http_integrations.py``): the test records them
with the integrations a bootstrap module applies at interpreter start, or runs them as they are.

    http_programs.py aiohttp-server | wsgi-server | asgi-server | hypercorn-server | waitress-server | gunicorn-server
                     | gunicorn-asgi-server
                                        prints "listening PORT", serves until GET /stop
    http_programs.py requests-client | httpx-client PORT N          calls the server, prints what it got (JSON)

Every server answers ``/items`` (200, JSON), ``/missing`` (404), ``/fail`` (its handler raises: the server's 500),
``/stream`` (a body in parts) and ``/file`` (a WSGI server: through its ``wsgi.file_wrapper``). A client calls
``/items`` N times, then each of the others, then a port where nothing listens, and prints each answer's status, body
and content headers, or the exception's type.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

_PARTS = [b"one ", b"two ", b"three"]
_FILE = b"a file's body, " * 1000


def bound_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def aiohttp_server() -> None:
    from aiohttp import web

    async def serve() -> None:
        stop = asyncio.Event()

        async def work(request: web.Request) -> web.Response:
            await asyncio.sleep(0.005)
            return web.json_response({"item": request.match_info["item"]})

        async def fail(request: web.Request) -> web.Response:
            raise ValueError("the handler failed")

        async def missing(request: web.Request) -> web.Response:
            raise web.HTTPNotFound()

        async def stream(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse()
            await response.prepare(request)
            for part in _PARTS:
                await response.write(part)
            return response

        async def file(request: web.Request) -> web.Response:
            return web.Response(body=_FILE, content_type="application/octet-stream")

        async def stop_serving(request: web.Request) -> web.Response:
            stop.set()
            return web.json_response({"stopping": True})

        app = web.Application()
        app.router.add_get("/items/{item}", work)
        app.router.add_get("/fail", fail)
        app.router.add_get("/missing", missing)
        app.router.add_get("/stream", stream)
        app.router.add_get("/file", file)
        app.router.add_get("/stop", stop_serving)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = bound_socket()
        await web.SockSite(runner, sock).start()
        print("listening", sock.getsockname()[1], flush=True)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(serve())


def wsgi_app(environ: dict[str, Any], start_response: Any) -> Any:
    path = environ["PATH_INFO"]
    if path.startswith("/items/"):
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"item": path[len("/items/") :]}).encode()]
    if path == "/fail":
        raise ValueError("the handler failed")
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter(_PARTS)
    if path == "/file":  # the server's own file wrapper: it sends the file as it does without the integrations
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](io.BytesIO(_FILE))
    if path == "/stop":
        (environ.get("stop") or stop_serving)()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"stopping": true}']
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"not found"]


def wsgi_server() -> None:
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server: WSGIServer

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        environ["stop"] = lambda: threading.Thread(target=server.shutdown).start()
        return wsgi_app(environ, start_response)

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    print("listening", server.server_port, flush=True)
    server.serve_forever()
    server.server_close()


#: What ``/stop`` calls: set by the server serving the app.
stop_serving: Any = None


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]

    async def answer(status: int, body: bytes, content_type: str = "application/json") -> None:
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    if path.startswith("/items/"):
        await asyncio.sleep(0.005)
        await answer(200, json.dumps({"item": path[len("/items/") :]}).encode())
    elif path == "/fail":
        raise ValueError("the handler failed")
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in _PARTS:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/file":
        await answer(200, _FILE, "application/octet-stream")
    elif path == "/stop":
        stop_serving()
        await answer(200, b'{"stopping": true}')
    else:
        await answer(404, b"not found", "text/plain")


def asgi_server() -> None:
    global stop_serving
    import uvicorn

    sock = bound_socket()
    server = uvicorn.Server(uvicorn.Config(asgi_app, log_level="critical", lifespan="off"))

    def stop() -> None:
        server.should_exit = True

    stop_serving = stop
    print("listening", sock.getsockname()[1], flush=True)
    server.run(sockets=[sock])


def hypercorn_server() -> None:
    global stop_serving
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    sock = bound_socket()
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.loglevel = "CRITICAL"

    async def run() -> None:
        global stop_serving
        stopping = asyncio.Event()
        stop_serving = stopping.set
        print("listening", sock.getsockname()[1], flush=True)
        await serve(asgi_app, config, shutdown_trigger=stopping.wait)  # type: ignore[arg-type]

    asyncio.run(run())


def waitress_server() -> None:
    global stop_serving
    import waitress.server

    sock = bound_socket()
    server = waitress.server.create_server(wsgi_app, sockets=[sock])
    stop_serving = lambda: os.kill(os.getpid(), signal.SIGINT)  # noqa: E731  (waitress's run() ends on it)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (started in the background, SIGINT is ignored)
    print("listening", sock.getsockname()[1], flush=True)
    server.run()


def gunicorn_server(worker_class: str = "sync") -> None:
    """gunicorn serving the WSGI app with a sync worker, or the ASGI app with its own ASGI worker."""
    global stop_serving
    from gunicorn.app.base import BaseApplication

    sock = bound_socket()
    sock.set_inheritable(True)

    class Served(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            self.cfg.set("bind", f"fd://{sock.fileno()}")
            self.cfg.set("workers", 1)
            self.cfg.set("loglevel", "critical")
            self.cfg.set("worker_class", worker_class)

        def load(self) -> Any:
            return asgi_app if worker_class == "asgi" else wsgi_app

    stop_serving = lambda: os.kill(os.getppid(), signal.SIGTERM)  # noqa: E731  (the worker asks the arbiter)
    print("listening", sock.getsockname()[1], flush=True)
    Served().run()


def _closed_port() -> int:
    sock = bound_socket()
    port: int = sock.getsockname()[1]
    sock.close()
    return port


_CONTENT = ("content-type", "content-length", "transfer-encoding")
_PATHS = ("/missing", "/fail", "/stream", "/file")


def requests_client(port: int, calls: int) -> list[Any]:
    import requests

    got: list[Any] = []
    urls = [f"http://127.0.0.1:{port}/items/{i}" for i in range(calls)]
    urls += [f"http://127.0.0.1:{port}{path}" for path in _PATHS] + [f"http://127.0.0.1:{_closed_port()}/items/0"]
    with requests.Session() as session:
        for url in urls:
            try:
                response = session.get(url, timeout=30)
            except Exception as exc:
                got.append(type(exc).__name__)
                continue
            headers = {k.lower(): v for k, v in response.headers.items() if k.lower() in _CONTENT}
            got.append([response.status_code, response.text, headers])
    return got


def httpx_client(port: int, calls: int) -> list[Any]:
    import httpx

    urls = [f"http://127.0.0.1:{port}/items/{i}" for i in range(calls)]
    urls += [f"http://127.0.0.1:{port}{path}" for path in _PATHS] + [f"http://127.0.0.1:{_closed_port()}/items/0"]

    def answer(response: httpx.Response) -> list[Any]:
        headers = {k.lower(): v for k, v in response.headers.items() if k.lower() in _CONTENT}
        return [response.status_code, response.text, headers]

    got: list[Any] = []
    with httpx.Client(timeout=30) as client:
        for url in urls:
            try:
                got.append(["sync", *answer(client.get(url))])
            except Exception as exc:
                got.append(["sync", type(exc).__name__])

    async def calls_async() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            for url in urls:
                try:
                    got.append(["async", *answer(await client.get(url))])
                except Exception as exc:
                    got.append(["async", type(exc).__name__])

    asyncio.run(calls_async())
    return got


if __name__ == "__main__":
    role = sys.argv[1]
    if role.endswith("-server"):
        import faulthandler

        faulthandler.register(signal.SIGUSR1, all_threads=True)  # (the test asks for the stacks of one that hangs)
        servers = {
            "aiohttp-server": aiohttp_server,
            "wsgi-server": wsgi_server,
            "asgi-server": asgi_server,
            "hypercorn-server": hypercorn_server,
            "waitress-server": waitress_server,
            "gunicorn-server": gunicorn_server,
            "gunicorn-asgi-server": lambda: gunicorn_server("asgi"),
        }
        servers[role]()
    else:
        client = {"requests-client": requests_client, "httpx-client": httpx_client}[role]
        print(json.dumps(client(int(sys.argv[2]), int(sys.argv[3]))))
