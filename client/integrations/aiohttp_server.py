"""A server span per request of aiohttp's server: around ``web.Application._handle`` (what serves each request of an
application) once ``aiohttp.web`` is imported, and ``middleware(timeline)`` for explicit use.

The span continues the caller's trace (its ``traceparent``), is labelled with the method and the route (the matched
resource's canonical path, ``/users/{id}``; the path when none matched), and holds ``method``, ``path``, ``route``
and the ``response`` map (``status``: the response's, or the raised ``HTTPException``'s) as args. It lasts as long as
the handler: a streamed response is written before the handler returns it. An exception from the handler is
recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came; but an ``HTTPException``
below 500 (``HTTPNotFound``, a redirect) is aiohttp's way to answer, recorded as its status alone. A sub-application,
or a middleware given explicitly under a recorded application, records no second span.

Why around ``_handle`` and not a middleware put first: an application with no middleware of its own skips aiohttp's
middleware chain, and a middleware costs each request about 12,000 instructions more than a wrapper of ``_handle``
(``benchmarks/bench_instructions.py --variants none,noop``). aiohttp matches the route inside ``_handle``, so the span
begins named by its path and is labelled with its route as it ends (a scope's ``label`` set as it ends).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from ringtrace.client.integrations.http_spans import SERVING, error_text, patch, server_label
from ringtrace.client.recording.trace_context import OpenSpan, close_span, open_span

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install", "middleware"]

_Handler = Callable[[Any], Awaitable[Any]]
#: The (method, route) pairs whose label is kept: a server's routes and methods, with room to spare.
_NAMED: Final = 4096
_serving = SERVING.get


class _ServerSpans:
    """Begins and ends the server span of each request of a timeline's (see the module's docstring)."""

    __slots__ = ("_answers", "_named", "_scope_of")

    def __init__(self, timeline: Timeline) -> None:
        #: aiohttp's ``HTTPException``: raised, it is a response.
        self._answers = getattr(sys.modules.get("aiohttp.web"), "HTTPException", ())
        #: The label and the route of each (method, matched route) seen: a server's routes are few and fixed once it
        #: serves, and reading a route's pattern and formatting the label cost a request about a microsecond.
        self._named: dict[tuple[str, object], tuple[str, str]] = {}
        self._scope_of = timeline._scope_of  # (what ``Timeline.server_span`` makes its span with: one call less)

    def begin(self, request: Any) -> OpenSpan | None:
        """``request``'s span, begun and named by its path until ``end`` (its route is matched after it begins);
        None for a request that cannot be read (served unrecorded)."""
        try:
            path = request.path
            headers = request.headers
            args = {"method": request.method, "path": path, "route": path, "response": {}}
            if headers.get("traceparent") is None:  # (aiohttp's headers, looked up in any case: no caller's span)
                headers = None
            return open_span(self._scope_of, path, "server", headers, args)
        except Exception:
            return None

    def end(self, span: OpenSpan, request: Any, result: Any, exc: BaseException | None) -> None:
        """The request was answered with ``result``, or raised ``exc``: the span is labelled with its route and
        ends."""
        scope, args, token, context = span
        try:
            response = args["response"]
            if exc is None:
                response["status"] = getattr(result, "status", None)
            else:
                status = getattr(exc, "status", None) if isinstance(exc, self._answers) else None
                if type(status) is int:  # (not another exception's status: an upstream's, say, answered with a 500)
                    response["status"] = status
                if type(status) is int and status < 500:  # (a 404 or a redirect, raised: an answer, not an error)
                    exc = None
                else:
                    response["error"] = error_text(exc)
            scope.label, args["route"] = self._label(request)
        except Exception:  # (a request's odd state: the span ends with what was filled in so far)
            pass
        if exc is None:
            close_span(scope, token, context, None, None, None)
        else:
            close_span(scope, token, context, type(exc), exc, exc.__traceback__)

    def _label(self, request: Any) -> tuple[str, str]:
        """The label and the route of ``request``, matched to a route (its resource's canonical path; the path when
        none matched, or matching it raised)."""
        method = request.method
        try:
            route_object = request.match_info.route
        except Exception:  # (no route: resolving it raised, an HTTPException or another; aiohttp asserts it is set)
            route_object = None
        found = self._named.get((method, route_object))
        if found is not None:
            return found
        resource = getattr(route_object, "resource", None)
        if resource is None:  # (each request that matched none has a route object of its own: not kept)
            path = request.path
            return server_label(method, path), path
        route = resource.canonical
        found = server_label(method, route), route
        if len(self._named) < _NAMED:
            self._named[method, route_object] = found
        return found


def _recording(spans: _ServerSpans, serve: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Any]:
    """``serve(first, request)`` (``Application._handle(self, request)``, say), each request in its span."""

    async def recorded(first: Any, request: Any) -> Any:
        if _serving():
            return await serve(first, request)
        span = spans.begin(request)
        if span is None:
            return await serve(first, request)
        token = SERVING.set(True)
        try:
            result = await serve(first, request)
        except BaseException as exc:
            spans.end(span, request, None, exc)
            raise
        finally:
            SERVING.reset(token)
        spans.end(span, request, result, None)
        return result

    return recorded


def _call(handler: _Handler, request: Any) -> Awaitable[Any]:
    return handler(request)


def middleware(timeline: Timeline) -> Callable[[Any, _Handler], Awaitable[Any]]:
    """An aiohttp middleware recording a server span per request into ``timeline`` (see the module's docstring):
    ``web.Application(middlewares=[middleware(tl)])``, for an application served where the integration is off."""
    recorded = _recording(_ServerSpans(timeline), _call)

    def ringtrace_server_span(request: Any, handler: _Handler) -> Awaitable[Any]:
        return recorded(handler, request)  # type: ignore[no-any-return]

    ringtrace_server_span.__middleware_version__ = 1  # type: ignore[attr-defined]  # what @web.middleware sets
    return ringtrace_server_span


def install(timeline: Timeline) -> None:
    """Record a span around each request every ``web.Application`` serves from now on."""
    application = sys.modules["aiohttp.web"].Application
    if not inspect.iscoroutinefunction(getattr(application, "_handle", None)):
        raise RuntimeError("aiohttp's web.Application._handle is not a coroutine function: this aiohttp is unknown")
    spans = _ServerSpans(timeline)
    patch(application, "_handle", lambda handle: _recording(spans, handle))
