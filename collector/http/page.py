"""The web view's page: ``GET /`` in a browser, and its static files under ``/ui/``.

The page and its files hold no data (every number comes from ``/sources``, ``/stats`` and ``/timeline``, which need
the token when the collector has one), so they are served without it: a browser can load the page, which then asks
for the token once. Each is sent with a Content-Security-Policy that lets it load and fetch from the collector itself
only. The files are the package's own (``static/``): plain JavaScript and CSS, no build step, nothing from elsewhere.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Final

from aiohttp import web

__all__ = ["SECURITY_HEADERS", "is_open_page", "page_response", "static_file", "wants_html"]

_STATIC: Final = "static"
#: What the page may load and talk to: the collector itself, nothing else (blob: for the downloads it makes).
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
#: The files under /ui/ and their types: a fixed list, so no path reaches outside it.
_FILES: Final = {
    "index.html": "text/html",
    "view.css": "text/css",
    "main.js": "text/javascript",
    "api.js": "text/javascript",
    "sources.js": "text/javascript",
    "timeline.js": "text/javascript",
    "lanes.js": "text/javascript",
    "perfetto.js": "text/javascript",
    "flamegraph.js": "text/javascript",
    "incidents.js": "text/javascript",
    "address.js": "text/javascript",
    "search.js": "text/javascript",
    "aggregates.js": "text/javascript",
    "trace_marks.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
_PREFIX: Final = "/ui/"


def wants_html(accept: str) -> bool:
    """Whether an Accept header prefers the page to JSON: it names ``text/html`` and ranks ``application/json`` no
    higher (``*/*`` alone, as curl sends, keeps the JSON list of endpoints)."""
    html = json = 0.0
    for item in accept.split(","):
        media, _, params = item.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.strip().lower()
        if media == "text/html":
            html = max(html, quality)
        elif media == "application/json":
            json = max(json, quality)
    return html > 0 and html >= json


def is_open_page(request: web.Request) -> bool:
    """Whether a request is for the page or one of its files, which need no token (they hold no data)."""
    if request.method not in ("GET", "HEAD"):
        return False
    if request.path == "/":
        return wants_html(request.headers.get("Accept", ""))
    return request.path.startswith(_PREFIX) and request.path[len(_PREFIX) :] in _FILES


@functools.cache
def _read(name: str) -> bytes:
    return resources.files("ringtrace.collector.http").joinpath(_STATIC, name).read_bytes()


def page_response() -> web.Response:
    return _file_response("index.html")


async def static_file(request: web.Request) -> web.Response:
    """``GET /ui/{name}``: one of the page's files."""
    name = request.match_info["name"]
    if name not in _FILES:
        raise web.HTTPNotFound(text=f"no file {name!r:.80} in the web view\n")
    return _file_response(name)


def _file_response(name: str) -> web.Response:
    headers = {**SECURITY_HEADERS, "Content-Type": f"{_FILES[name]}; charset=utf-8"}
    return web.Response(body=_read(name), headers=headers)
