"""Redirects, with each HTTP client library against a real server on 127.0.0.1 port 0 that redirects (relatively
and absolutely, and from a POST to a GET): each request on the wire has a client span of its own and carries its own
``traceparent``; the requests of one call are one trace, the first request's span lasting the call and the others
inside it, one after the other (but urllib's, whose opener follows a redirect outside the request's span); each span
has its own request's method, URL and status."""

from __future__ import annotations

import itertools
import textwrap
from typing import Any

import pytest
from http_in_process import run

_PROGRAM = """
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

seen = []
class Redirecting(BaseHTTPRequestHandler):
    def answer(self):
        seen.append([self.command, self.path.split("?")[0], self.headers.get("traceparent")])
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        port = self.server.server_address[1]
        status, location = {
            "/hop/1": (302, "/hop/2?token=t"),
            "/hop/2": (307, f"http://127.0.0.1:{port}/end"),
            "/form": (303, "/end"),
            "/gone": (302, f"http://127.0.0.1:{closed}/nowhere"),
        }.get(self.path.split("?")[0], (200, None))
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"end" if status == 200 else b"...")
    do_GET = do_POST = answer
    def log_message(self, *args):
        pass

unbound = socket.socket()
unbound.bind(("127.0.0.1", 0))
closed = unbound.getsockname()[1]  # bound, never listening: a connection to it is refused
server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
threading.Thread(target=server.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{server.server_address[1]}"
"""

#: Each client: a GET of /hop/1 (two redirects) and a POST of /form (a 303: a GET next); the bodies it got.
_CALLS = {
    "requests": """
        import requests
        bodies = [requests.get(base + "/hop/1").text, requests.post(base + "/form", data=b"x").text]
    """,
    "httpx": """
        import httpx
        with httpx.Client(follow_redirects=True) as client:
            bodies = [client.get(base + "/hop/1").text, client.post(base + "/form", content=b"x").text]
    """,
    "httpx-async": """
        import httpx
        async def main():
            async with httpx.AsyncClient(follow_redirects=True) as client:
                got = await client.get(base + "/hop/1"), await client.post(base + "/form", content=b"x")
                return [answer.text for answer in got]
        bodies = asyncio.run(main())
    """,
    "aiohttp": """
        import aiohttp
        async def main():
            async with aiohttp.ClientSession() as session:
                bodies = []
                for method, path in (("GET", "/hop/1"), ("POST", "/form")):
                    async with session.request(method, base + path, data=b"x" if method == "POST" else None) as got:
                        bodies.append(await got.text())
                return bodies
        bodies = asyncio.run(main())
    """,
    "urllib": """
        import urllib.request
        bodies = [urllib.request.urlopen(base + "/hop/1", timeout=30).read().decode(),
                  urllib.request.urlopen(base + "/form", data=b"x", timeout=30).read().decode()]
    """,
}


def _calls(spans: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The client spans, by call: each call's first span, then those inside it."""
    calls: list[list[dict[str, Any]]] = []
    for span in sorted((s for s in spans if s["kind"] == "client"), key=lambda s: s["ts"]):
        if calls and span.get("parent_span_id") == calls[-1][0]["span_id"]:
            calls[-1].append(span)
        else:
            calls.append([span])
    return calls


@pytest.mark.parametrize("client", sorted(_CALLS))
def test_each_request_of_a_redirect_has_its_own_span_and_traceparent(client: str) -> None:
    program = _PROGRAM + textwrap.dedent(_CALLS[client])
    got = run(program + 'print(json.dumps({"bodies": bodies, "seen": seen, "spans": spans()}))\n')
    assert got["bodies"] == ["end", "end"]
    seen = got["seen"]
    assert [(method, path) for method, path, _ in seen] == [
        ("GET", "/hop/1"), ("GET", "/hop/2"), ("GET", "/end"), ("POST", "/form"), ("GET", "/end"),
    ]  # fmt: skip
    calls = _calls(got["spans"])
    # urllib's opener follows a redirect once the request's span has ended (``do_open`` returned): each of its requests
    # is a span of the program's trace (here none: each a trace of its own); the others' are the call's.
    assert [len(call) for call in calls] == ([1] * 5 if client == "urllib" else [3, 2])
    spans = [span for call in calls for span in call]
    for span, (method, path, traceparent) in zip(spans, seen, strict=True):
        assert traceparent == f"00-{span['trace_id']}-{span['span_id']}-01"  # each request its own span's
        assert span["method"] == method and span["url"].endswith(path)  # its own request's, no query
        assert span["name"] == f"{method} 127.0.0.1:{span['url'].split(':')[2].split('/')[0]}"
    assert [span["response"] for span in spans] == [
        {"status": 302}, {"status": 307}, {"status": 200}, {"status": 303}, {"status": 200},
    ]  # fmt: skip
    for first, *others in calls:
        if not others:
            continue
        assert "parent_span_id" not in first  # (called outside any trace: the call's is a trace of its own)
        assert {span["trace_id"] for span in others} == {first["trace_id"]}
        assert all(earlier["end"] <= later["ts"] for earlier, later in itertools.pairwise(others))
        assert first["ts"] <= others[0]["ts"] and others[-1]["end"] <= first["end"]


#: Each client: a GET of /gone, redirected to a port where nothing listens; what it raised.
_FAILING = {
    "requests": """
        import requests
        try:
            requests.get(base + "/gone")
        except Exception as exc:
            raised = type(exc).__name__
    """,
    "httpx": """
        import httpx
        try:
            httpx.get(base + "/gone", follow_redirects=True)
        except Exception as exc:
            raised = type(exc).__name__
    """,
    "aiohttp": """
        import aiohttp
        async def main():
            async with aiohttp.ClientSession() as session:
                try:
                    await session.get(base + "/gone")
                except Exception as exc:
                    return type(exc).__name__
        raised = asyncio.run(main())
    """,
    "urllib": """
        import urllib.request
        try:
            urllib.request.urlopen(base + "/gone", timeout=30)
        except Exception as exc:
            raised = type(exc).__name__
    """,
}


@pytest.mark.parametrize("client", sorted(_FAILING))
def test_a_redirect_to_where_nothing_listens_is_recorded_on_the_calls_spans_and_raised_as_it_came(client: str) -> None:
    program = _PROGRAM + textwrap.dedent(_FAILING[client])
    got = run(program + 'print(json.dumps({"raised": raised, "spans": spans()}))\n')
    first, refused = sorted((s for s in got["spans"] if s["kind"] == "client"), key=lambda s: s["ts"])
    assert got["raised"] == {"requests": "ConnectionError", "httpx": "ConnectError", "aiohttp": "ClientConnectorError",
                             "urllib": "URLError"}[client]  # fmt: skip
    assert first["response"]["status"] == 302 and first["url"].endswith("/gone")
    assert refused["url"].endswith("/nowhere") and "status" not in refused["response"]
    assert refused["exception"] and refused["response"]["error"]  # the library's exception where it came from
    if client == "urllib":  # its request ended before the opener followed the redirect
        assert "exception" not in first and first["end"] <= refused["ts"]
    else:  # the call's: the exception went through the first request's span too
        assert refused["parent_span_id"] == first["span_id"] and first["exception"] == got["raised"]


def test_an_aiohttp_sessions_own_trace_configs_are_left_as_given_and_too_many_redirects_is_recorded() -> None:
    program = _PROGRAM + textwrap.dedent(
        """
        import aiohttp
        theirs = aiohttp.TraceConfig()
        started = []
        async def on_start(session, context, params):
            started.append(str(params.url.path))
        theirs.on_request_start.append(on_start)
        given = [theirs]

        async def main():
            async with aiohttp.ClientSession(trace_configs=given) as session:
                try:
                    await session.get(base + "/hop/1", max_redirects=1)
                except aiohttp.TooManyRedirects as exc:
                    return type(exc).__name__
        raised = asyncio.run(main())
        print(json.dumps({"raised": raised, "given": len(given), "started": started, "seen": seen, "spans": spans()}))
        """
    )
    got = run(program)
    assert got["raised"] == "TooManyRedirects" and got["given"] == 1 and got["started"] == ["/hop/1"]
    first, never_sent = sorted(got["spans"], key=lambda s: s["ts"])
    assert [path for _, path, _ in got["seen"]] == ["/hop/1"]
    assert first["response"]["status"] == 302 and first["exception"] == "TooManyRedirects"
    # The redirect past max_redirects: its span begun as aiohttp said where it leads, ended as aiohttp refused it.
    assert never_sent["url"].endswith("/hop/2") and never_sent["exception"] == "TooManyRedirects"
    assert never_sent["parent_span_id"] == first["span_id"]
