"""The HTTP integrations in one process, against real servers on 127.0.0.1 port 0 and the real libraries: what each
span holds, one span per request and no more, bodies read to their end, exceptions passed on as they came, patched
functions that keep their signatures, and nothing imported that the program did not import. Each case runs in a
fresh interpreter: the integrations patch the libraries for the process's whole life."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from http_in_process import run
from ringtrace.client.accelerator import speedups
from ringtrace.client.integrations.http_spans import client_label, public_url


def test_nothing_is_imported_nor_patched_until_the_program_imports_its_library() -> None:
    got = run(
        """
        libraries = ("requests", "httpx", "aiohttp", "uvicorn", "werkzeug", "urllib.request", "wsgiref.handlers")
        before = [name for name in libraries if name in sys.modules]
        ours = sorted(name for name in sys.modules if name.startswith("ringtrace.client.integrations."))
        import requests
        print(json.dumps([before, ours, applied(), failed()]))
        """
    )
    before, ours, installed, not_installed = got
    assert before == [] and ours == ["ringtrace.client.integrations.registry"]
    assert installed == ["urllib", "requests"] and not_installed == {}  # requests imports urllib.request


def test_patched_functions_keep_their_signatures_stay_async_and_are_patched_once() -> None:
    got = run(
        """
        import aiohttp, aiohttp.web, httpx, requests, urllib.request, uvicorn, werkzeug.serving, wsgiref.handlers
        import gunicorn.workers.base, gunicorn.workers.gasgi, hypercorn.app_wrappers, waitress.server
        from ringtrace.client.integrations import requests_client
        requests_client.install(tl)  # again: still one wrapper
        patched = [requests.Session.send, httpx.Client.send, httpx.AsyncClient.send, aiohttp.ClientSession.__init__,
                   urllib.request.AbstractHTTPHandler.do_open, uvicorn.Config.load, wsgiref.handlers.BaseHandler.run,
                   werkzeug.serving.BaseWSGIServer.__init__, aiohttp.web.Application._handle,
                   gunicorn.workers.base.Worker.load_wsgi, gunicorn.workers.gasgi.ASGIWorker.load_wsgi,
                   hypercorn.app_wrappers.ASGIWrapper.__init__, waitress.server.BaseWSGIServer.__init__]
        print(json.dumps({
            "signatures": [str(inspect.signature(f)) == str(inspect.signature(f.__wrapped__)) for f in patched],
            "once": [not hasattr(f.__wrapped__, "__wrapped__") for f in patched],
            "async": [inspect.iscoroutinefunction(httpx.AsyncClient.send)],
            "private": [hasattr(aiohttp.ClientSession._request, "__wrapped__")],
            "names": [f.__name__ for f in patched],
            "applied": sorted(applied()),
        }))
        """
    )
    assert all(got["signatures"]) and all(got["once"]) and got["async"] == [True] and got["private"] == [False]
    assert got["names"] == ["send", "send", "send", "__init__", "do_open", "load", "run", "__init__", "_handle",
                            "load_wsgi", "load_wsgi", "__init__", "__init__"]  # fmt: skip
    # uvicorn came first of the ASGI servers, werkzeug of the WSGI ones: each integration patched it when it was
    # imported, and each other server's patch waited for its own import.
    integrations = ["asgi", "wsgi", "aiohttp-server", "requests", "httpx", "aiohttp-client", "urllib"]
    servers = ["wsgi:wsgiref.handlers", "wsgi:gunicorn.workers.base", "wsgi:waitress.server"]
    servers += ["asgi:gunicorn.workers.gasgi", "asgi:hypercorn.app_wrappers"]
    assert got["applied"] == sorted(integrations + servers)


def test_werkzeug_serves_a_streamed_body_in_its_span_and_urllib_records_each_redirect_once() -> None:
    got = run(
        """
        import urllib.request
        from werkzeug.serving import make_server
        from ringtrace.client.integrations.wsgi_server import WSGIMiddleware

        seen = {}
        def app(environ, start_response):
            path = environ["PATH_INFO"]
            seen.setdefault(path, []).append(environ.get("HTTP_TRACEPARENT"))
            if path == "/old":
                start_response("302 Found", [("Location", "/stream")])
                return [b""]
            def parts():
                for part in (b"a", b"b", b"c"):
                    yield part
                seen["last part"] = time.monotonic_ns()
            start_response("200 OK", [("Content-Type", "text/plain")])
            return parts()

        # Wrapped here too, under the patched server: still one span per request.
        server = make_server("127.0.0.1", 0, WSGIMiddleware(app, tl), threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/old?token=t") as response:
            body = response.read().decode()
        server.shutdown()
        print(json.dumps({"body": body, "seen": seen, "spans": spans()}))
        """
    )
    assert got["body"] == "abc"
    spans = got["spans"]
    clients = [s for s in spans if s["kind"] == "client"]
    servers = [s for s in spans if s["kind"] == "server"]
    assert [s["name"] for s in clients] == ["GET 127.0.0.1:" + clients[0]["name"].rsplit(":", 1)[1]] * 2
    assert [c["url"].rsplit("/", 1)[1] for c in clients] == ["old", "stream"]  # no query
    assert [c["response"]["status"] for c in clients] == [302, 200]
    assert sorted(s["path"] for s in servers) == ["/old", "/stream"]  # one each, though the app is wrapped twice
    for client, server in zip(clients, sorted(servers, key=lambda s: s["ts"]), strict=True):
        assert server["parent_span_id"] == client["span_id"] and server["trace_id"] == client["trace_id"]
        (traceparent,) = got["seen"][server["path"]]
        assert traceparent == f"00-{client['trace_id']}-{client['span_id']}-01"  # each hop its own span's
    (stream,) = [s for s in servers if s["path"] == "/stream"]
    assert stream["end"] >= got["seen"]["last part"] and stream["response"] == {"status": 200}


def test_a_request_it_cannot_read_is_sent_unrecorded_the_failure_counted_and_the_librarys_error_raised() -> None:
    got = run(
        """
        import requests
        from ringtrace.client.integrations.hook_errors import hook_failures

        raised = []
        for send in (requests.Session.send, requests.Session.send.__wrapped__):  # with the integration, and without
            try:
                send(requests.Session(), object())
            except AttributeError as exc:
                raised.append(str(exc))
        print(json.dumps({"raised": raised, "failures": hook_failures(), "spans": spans()}))
        """
    )
    with_it, without = got["raised"]
    assert with_it == without and got["failures"] == {"requests": 1} and got["spans"] == []


def test_a_handlers_exception_is_recorded_and_raised_on_as_it_came() -> None:
    got = run(
        """
        from ringtrace.client.integrations.asgi_server import ASGIMiddleware
        from ringtrace.client.integrations.wsgi_server import WSGIMiddleware

        failure = ValueError("the handler failed")
        def wsgi_app(environ, start_response):
            raise failure
        async def asgi_app(scope, receive, send):
            raise failure
        same = []
        try:
            WSGIMiddleware(wsgi_app, tl)({"REQUEST_METHOD": "POST", "PATH_INFO": "/w"}, lambda *a: None)
        except ValueError as exc:
            same.append(exc is failure and exc.__traceback__.tb_next is not None)
        async def no_message():
            return {}
        async def call_asgi():
            try:
                await ASGIMiddleware(asgi_app, tl)({"type": "http", "method": "PUT", "path": "/a", "headers": []},
                                                   no_message, no_message)
            except ValueError as exc:
                same.append(exc is failure)
        asyncio.run(call_asgi())
        print(json.dumps({"same": same, "spans": spans()}))
        """
    )
    assert got["same"] == [True, True]
    names = sorted((s["name"], s["exception"], s["response"]["error"]) for s in got["spans"])
    assert names == [("POST /w", "ValueError", "the handler failed"), ("PUT /a", "ValueError", "the handler failed")]


def test_an_aiohttp_client_sends_traceparent_without_changing_the_callers_headers() -> None:
    got = run(
        """
        import aiohttp
        from aiohttp import web

        async def main():
            async def echo(request):
                return web.json_response({"traceparent": request.headers.get("traceparent"),
                                          "mine": request.headers.get("x-mine")})
            app = web.Application()
            app.router.add_get("/echo", echo)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            mine = {"x-mine": "kept"}
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/echo", headers=mine) as response:
                    answer = await response.json()
            await runner.cleanup()
            return answer, mine

        answer, mine = asyncio.run(main())
        print(json.dumps({"answer": answer, "mine": mine, "spans": spans()}))
        """
    )
    (client,) = [s for s in got["spans"] if s["kind"] == "client"]
    (server,) = [s for s in got["spans"] if s["kind"] == "server"]
    assert got["mine"] == {"x-mine": "kept"} and got["answer"]["mine"] == "kept"
    assert got["answer"]["traceparent"] == f"00-{client['trace_id']}-{client['span_id']}-01"
    assert server["parent_span_id"] == client["span_id"] and server["name"] == "GET /echo"
    assert client["response"] == {"status": 200} and server["response"] == {"status": 200}


def test_a_recorded_url_holds_no_user_password_query_nor_fragment() -> None:
    assert public_url("https://user:secret@example.com:8443/a/b?token=t#part") == "https://example.com:8443/a/b"
    assert public_url("http://[::1]/x") == "http://[::1]/x" and public_url("/relative?q=1") == "/relative"
    assert client_label("GET", "https://user:secret@example.com:8443/a?b=c") == "GET example.com:8443"


def test_a_server_whose_patch_fails_is_said_once_and_leaves_the_others_patched() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(
            """
            import logging, sys, types
            logging.basicConfig(level=logging.WARNING, format="%(message)s")
            sys.modules["waitress.server"] = types.ModuleType("waitress.server")  # a waitress with no server class
            import wsgiref.handlers
            from ringtrace.client import Timeline
            from ringtrace.client.integrations import applied, apply
            apply(Timeline("t"), {"wsgi"})
            print(applied(), hasattr(wsgiref.handlers.BaseHandler.run, "__wrapped__"))
            """
        )],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['wsgi'] True"
    assert result.stderr.count("the wsgi integration is off under waitress.server: AttributeError(") == 1


def test_an_aiohttp_sub_application_under_an_explicit_middleware_records_one_span_labelled_with_its_route() -> None:
    got = run(
        """
        import urllib.request
        from aiohttp import web
        from ringtrace.client.integrations.aiohttp_server import middleware

        async def main():
            async def item(request):
                return web.json_response({"id": request.match_info["id"]})
            sub = web.Application()
            sub.router.add_get("/items/{id}", item)
            app = web.Application(middlewares=[middleware(tl)])  # given here, and put first by the integration too
            app.add_subapp("/sub", sub)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            url = f"http://127.0.0.1:{port}/sub/items/7"
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).read().decode())
            await runner.cleanup()
            return body

        body = asyncio.run(main())
        print(json.dumps({"body": body, "spans": spans()}))
        """
    )
    assert json.loads(got["body"]) == {"id": "7"}
    (client,) = [s for s in got["spans"] if s["kind"] == "client"]
    (server,) = [s for s in got["spans"] if s["kind"] == "server"]
    assert server["name"] == "GET /sub/items/{id}" and server["route"] == "/sub/items/{id}"
    assert server["path"] == "/sub/items/7" and server["parent_span_id"] == client["span_id"]


def test_aiohttps_http_exceptions_are_answers_and_another_exceptions_status_is_not_the_response() -> None:
    # HTTPNotFound raised is aiohttp's way to answer 404: the status, no error. A ClientResponseError (an upstream's
    # 404, raise_for_status()) has a status of its own too, but the client gets a 500: the span is in error, with the
    # exception, and no status it was never answered with.
    got = run(
        """
        import urllib.error, urllib.request
        import aiohttp
        from aiohttp import web

        async def main():
            async def missing(request):
                raise web.HTTPNotFound()
            async def upstream(request):
                raise aiohttp.ClientResponseError(None, (), status=404, message="upstream said no")
            app = web.Application()
            app.router.add_get("/missing", missing)
            app.router.add_get("/upstream", upstream)
            return await aiohttp_statuses(app, ["/missing", "/upstream"])

        statuses = asyncio.run(main())
        print(json.dumps({"statuses": statuses, "spans": spans()}))
        """
    )
    assert got["statuses"] == [404, 500]
    servers = {s["path"]: s for s in got["spans"] if s["kind"] == "server"}
    assert servers["/missing"]["response"] == {"status": 404} and "exception" not in servers["/missing"]
    assert servers["/upstream"]["exception"] == "ClientResponseError"
    assert set(servers["/upstream"]["response"]) == {"error"}  # (its text: what str() of it gives, if anything)


def test_an_aiohttp_request_whose_route_matching_raises_is_labelled_by_its_path_with_its_answer() -> None:
    # aiohttp matches the route inside what the span is recorded around: matching that raises an HTTPException is
    # aiohttp's answer (403 here, no error), another exception an error (500); both spans named by method and path.
    got = run(
        """
        import urllib.error, urllib.request
        from aiohttp import web

        class Raising(web.DynamicResource):
            async def resolve(self, request):
                if request.path == "/forbid":
                    raise web.HTTPForbidden()
                raise RuntimeError("matching broke")

        async def main():
            async def never(request):
                return web.Response(text="never")
            app = web.Application()
            resource = Raising("/{anything}")
            app.router.register_resource(resource)
            resource.add_route("GET", never)
            return await aiohttp_statuses(app, ["/forbid", "/boom"])

        statuses = asyncio.run(main())
        print(json.dumps({"statuses": statuses, "spans": spans()}))
        """
    )
    assert got["statuses"] == [403, 500]
    servers = {s["path"]: s for s in got["spans"] if s["kind"] == "server"}
    forbid, boom = servers["/forbid"], servers["/boom"]
    assert (forbid["name"], forbid["route"], forbid["response"]) == ("GET /forbid", "/forbid", {"status": 403})
    assert "exception" not in forbid
    assert (boom["name"], boom["exception"], boom["response"]) == (
        "GET /boom",
        "RuntimeError",
        {"error": "matching broke"},
    )


def test_a_starlette_route_is_recorded_and_an_httpx_client_through_an_asgi_transport_is_traced() -> None:
    got = run(
        """
        import httpx
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route
        from ringtrace.client.integrations.asgi_server import ASGIMiddleware

        async def item(request):
            return JSONResponse({"id": request.path_params["id"]})

        app = ASGIMiddleware(Starlette(routes=[Route("/items/{id:int}", item)]), tl)

        async def main():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
                found, missing = await client.get("/items/7"), await client.get("/nothing")
            return [found.status_code, found.json(), missing.status_code]

        print(json.dumps({"answers": asyncio.run(main()), "spans": spans()}))
        """
    )
    assert got["answers"] == [200, {"id": 7}, 404]
    clients = [s for s in got["spans"] if s["kind"] == "client"]
    servers = [s for s in got["spans"] if s["kind"] == "server"]
    assert [c["name"] for c in clients] == ["GET shop.test"] * 2
    assert [s["parent_span_id"] for s in servers] == [c["span_id"] for c in clients]
    assert [s["response"] for s in servers] == [{"status": 200, "route": "/items/{id}"}, {"status": 404}]


def test_a_client_library_sent_through_another_records_one_span_the_first_ones() -> None:
    got = run(
        """
        import httpx, urllib.request
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = []
        class Answering(BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.headers.get("traceparent"))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Answering)
        threading.Thread(target=server.serve_forever, daemon=True).start()

        class ThroughUrllib(httpx.BaseTransport):  # an httpx transport that sends with urllib.request
            def handle_request(self, request):
                sent = urllib.request.Request(str(request.url), headers=dict(request.headers))
                with urllib.request.urlopen(sent, timeout=30) as answer:
                    return httpx.Response(answer.status, content=answer.read())

        with httpx.Client(transport=ThroughUrllib()) as client:
            body = client.get(f"http://127.0.0.1:{server.server_address[1]}/items").text
        server.shutdown()
        print(json.dumps({"body": body, "seen": seen, "spans": spans()}))
        """
    )
    (span,) = got["spans"]
    assert got["body"] == "ok" and span["name"].startswith("GET 127.0.0.1:") and span["response"] == {"status": 200}
    assert got["seen"] == [f"00-{span['trace_id']}-{span['span_id']}-01"]


def test_an_aiohttp_route_is_named_once_per_method_and_each_request_keeps_its_own_path() -> None:
    # A route's pattern is read once for each method it answers (a server's routes are fixed once it serves), not
    # once a request; each span still has its request's own path, and a request no route matched its path as route.
    got = run(
        """
        import urllib.error, urllib.request
        from aiohttp import web

        reads = []
        class Counted(web.DynamicResource):
            @property
            def canonical(self):
                reads.append(1)
                return super().canonical

        async def main():
            async def item(request):
                return web.json_response({"id": request.match_info["id"]})
            app = web.Application()
            resource = Counted("/items/{id}")
            app.router.register_resource(resource)
            resource.add_route("GET", item)
            resource.add_route("POST", item)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            def status(path, method):
                request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=None)
                try:
                    return urllib.request.urlopen(request, timeout=30).status
                except urllib.error.HTTPError as exc:
                    return exc.code
            reads.clear()
            calls = [("/items/1", "GET"), ("/items/2", "GET"), ("/items/3", "POST"), ("/items/4", "GET"),
                     ("/items/5", "POST"), ("/nothing", "GET"), ("/nothing", "GET")]
            got = [await asyncio.to_thread(status, path, method) for path, method in calls]
            await runner.cleanup()
            return got

        statuses = asyncio.run(main())
        print(json.dumps({"statuses": statuses, "reads": len(reads), "spans": spans()}))
        """
    )
    assert got["statuses"] == [200, 200, 200, 200, 200, 404, 404]
    servers = sorted((s for s in got["spans"] if s["kind"] == "server"), key=lambda s: s["ts"])
    assert [(s["name"], s["path"], s["route"], s["response"]["status"]) for s in servers] == [
        ("GET /items/{id}", "/items/1", "/items/{id}", 200),
        ("GET /items/{id}", "/items/2", "/items/{id}", 200),
        ("POST /items/{id}", "/items/3", "/items/{id}", 200),
        ("GET /items/{id}", "/items/4", "/items/{id}", 200),
        ("POST /items/{id}", "/items/5", "/items/{id}", 200),
        ("GET /nothing", "/nothing", "/nothing", 404),
        ("GET /nothing", "/nothing", "/nothing", 404),
    ]
    assert got["reads"] == 2  # once for GET, once for POST


def test_aiohttp_s_properties_read_in_place_still_answer_as_a_program_s_own_do() -> None:
    # The C twin reads aiohttp's path, match_info, route and status as the attributes their getters return: a
    # request's decoded path, a response's status, and a subclass's own property (a request's path) are still what
    # the span holds.
    got = run(
        """
        import urllib.error, urllib.request, warnings
        from aiohttp import web

        class Prefixed(web.Request):
            @property
            def path(self):
                return "/prefixed" + super().path

        class PrefixedApp(web.Application):
            def _make_request(self, *args, **kwargs):
                return super()._make_request(*args, _cls=Prefixed, **kwargs)

        path_cached = []

        async def main():
            async def item(request):
                path_cached.append("path" in request._cache)  # (read through aiohttp's cached property)
                return web.Response(text=request.match_info["id"])
            async def teapot(request):
                return web.Response(status=418, text="short and stout")
            plain = web.Application()
            plain.router.add_get("/items/{id}", item)
            plain.router.add_get("/teapot", teapot)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (aiohttp discourages subclassing Application)
                prefixed = PrefixedApp()
            prefixed.router.add_get("/items/{id}", item)
            return (await aiohttp_statuses(plain, ["/items/a%20b", "/teapot", "/items/c"])
                    + await aiohttp_statuses(prefixed, ["/items/d"]))

        statuses = asyncio.run(main())
        print(json.dumps({"statuses": statuses, "path_cached": path_cached, "spans": spans()}))
        """
    )
    assert got["statuses"] == [200, 418, 200, 200]
    # The C twin read the first request's path through the property too (to hold the attribute to it), later ones
    # in place; the pure-Python twin and a subclass's own path, through the property each time.
    assert got["path_cached"] == ([True, False, True] if speedups is not None else [True, True, True])
    servers = sorted((s for s in got["spans"] if s["kind"] == "server"), key=lambda s: s["ts"])
    assert [(s["name"], s["path"], s["route"], s["response"]["status"]) for s in servers] == [
        ("GET /items/{id}", "/items/a b", "/items/{id}", 200),
        ("GET /teapot", "/teapot", "/teapot", 418),
        ("GET /items/{id}", "/items/c", "/items/{id}", 200),
        ("GET /items/{id}", "/prefixed/items/d", "/items/{id}", 200),
    ]
