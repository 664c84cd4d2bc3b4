"""A client span per request that ``urllib.request`` sends over HTTP or HTTPS, ``traceparent`` written into it.

``AbstractHTTPHandler.do_open`` is wrapped: the HTTP and HTTPS handlers (and any subclass) send each request on the
wire through it, so ``urlopen`` and every opener record one span per request, each redirect a span of its own. The
span is labelled with the method and the host, and holds ``method``, ``url`` (without user name, password, query or
fragment) and the ``response`` map (``status``) as args; it ends when the response's headers are in (the body is read
after, by the program), and a status of 400 or more is recorded before urllib raises its ``HTTPError``. An exception
is recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came. ``traceparent`` is an
unredirected header of the request: a redirect's request gets its own span's. (The opener follows a redirect once
``do_open`` has returned, the first request's span ended: the requests of a redirect are spans one after the other in
the trace the program is in, each a trace of its own outside any.)
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import patch, wrap_client

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "urllib"


class _Unredirected:
    """Where ``traceparent`` goes: an unredirected header of the request, which urllib does not copy into a
    redirect's request (that one gets its own span's)."""

    __slots__ = ("_request",)

    def __init__(self, request: Any) -> None:
        self._request = request

    def __setitem__(self, name: str, value: str) -> None:
        self._request.add_unredirected_header(name.capitalize(), value)


def _request(handler: Any, http_class: Any, req: Any, **http_conn_args: Any) -> tuple[object, object, Any]:
    """``do_open``'s request: its method, URL and where its headers are written."""
    return req.get_method(), req.full_url, _Unredirected(req)


def _status(response: Any) -> object:
    return getattr(response, "status", None)


def install(timeline: Timeline) -> None:
    """Wrap ``urllib.request.AbstractHTTPHandler.do_open``."""
    patch(sys.modules["urllib.request"].AbstractHTTPHandler, "do_open", wrap_client(timeline, _NAME, _request, _status))
