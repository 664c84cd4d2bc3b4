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
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeAlias

from ringtrace.client.accelerator import speedups
from ringtrace.client.integrations.http_spans import error_text, patch, server_label
from ringtrace.client.recording.trace_context import close_span, open_span, serving

if TYPE_CHECKING:
    import contextvars

    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install", "middleware"]

_Handler = Callable[[Any], Awaitable[Any]]
#: The (method, route) pairs whose label is kept: a server's routes and methods, with room to spare.
_NAMED: Final = 4096
#: A request's span as ``begin`` began it: ``open_span``'s.
ServerSpan: TypeAlias = "tuple[Any, dict[str, Any], contextvars.Token[Any], Any]"


class ServerSpans(NamedTuple):
    """What the server spans of a timeline's applications share (``begin`` and ``end`` take it first)."""

    #: What ``Timeline.server_span`` makes its span with (one call less).
    scope_of: Callable[[object, dict[str, Any]], Any]
    #: aiohttp's ``HTTPException``: raised, it is a response.
    answers: type | tuple[type, ...]
    #: The label and the route of each (method, matched route) seen: a server's routes are few and fixed once it
    #: serves, and reading a route's pattern and formatting the label cost a request about a microsecond.
    named: dict[tuple[str, object], tuple[str, str]]


def _spans_of(timeline: Timeline) -> ServerSpans:
    if speedups is not None:
        speedups.configure_aiohttp_reads(*_aiohttp_reads())
    return ServerSpans(timeline._scope_of, getattr(sys.modules.get("aiohttp.web"), "HTTPException", ()), {})


#: What the C twin reads of aiohttp's in place of its properties: each property's owner in ``aiohttp.web``, its name,
#: and the attributes its getter returns (``request.path`` is ``request._rel_url.path``). A property is a Python
#: frame a request, and aiohttp's cached ones an entry in the request's cache: read so, these four cost a request
#: about 1,900 instructions less (``bench_instructions.py``).
_AIOHTTP_READS: Final = (
    ("Request", "path", ("_rel_url", "path")),
    ("Request", "match_info", ("_match_info",)),
    ("UrlMappingMatchInfo", "route", ("_route",)),
    ("StreamResponse", "status", ("_status",)),
)


def _aiohttp_reads() -> tuple[tuple[object, ...], tuple[tuple[str, ...], ...]]:
    """``configure_aiohttp_reads``' arguments: aiohttp's properties (None where this aiohttp has none of that name)
    and the attributes each one's getter returns. The C side reads those only where an object's type still has
    aiohttp's property, and holds its first read of each to what the property gives."""
    web = sys.modules.get("aiohttp.web")
    properties = tuple(
        inspect.getattr_static(getattr(web, owner, None), name, None) for owner, name, _ in _AIOHTTP_READS
    )
    return properties, tuple(attributes for _, _, attributes in _AIOHTTP_READS)


def begin_in_python(spans: ServerSpans, request: Any) -> ServerSpan | None:
    """``begin`` in Python (the C recorder's is its twin): ``request``'s span, begun and named by its path until
    ``end`` (its route is matched after it begins); None inside another's (an app inside another, a middleware given
    under a recorded app) and for a request that cannot be read (served unrecorded)."""
    if serving():
        return None
    try:
        path = request.path
        headers = request.headers
        args = {"method": request.method, "path": path, "route": path, "response": {}}
        if headers.get("traceparent") is None:  # (aiohttp's headers, looked up in any case: no caller's span)
            headers = None
        return open_span(spans.scope_of, path, "server", headers, args)
    except Exception:
        return None


def end_in_python(spans: ServerSpans, span: ServerSpan, request: Any, result: Any, exc: BaseException | None) -> None:
    """``end`` in Python (the C recorder's is its twin): the request was answered with ``result``, or raised
    ``exc``: the span is labelled with its route and ends."""
    scope, args, token, context = span
    try:
        response = args["response"]
        if exc is None:
            response["status"] = getattr(result, "status", None)
        else:
            status = getattr(exc, "status", None) if isinstance(exc, spans.answers) else None
            if type(status) is int:  # (not another exception's status: an upstream's, say, answered with a 500)
                response["status"] = status
            if type(status) is int and status < 500:  # (a 404 or a redirect, raised: an answer, not an error)
                exc = None
            else:
                response["error"] = error_text(exc)
        scope.label, args["route"] = label_of(spans, request)
    except Exception:  # (a request's odd state: the span ends with what was filled in so far)
        pass
    if exc is None:
        close_span(scope, token, context, None, None, None)
    else:
        close_span(scope, token, context, type(exc), exc, exc.__traceback__)


def label_of(spans: ServerSpans, request: Any) -> tuple[str, str]:
    """The label and the route of ``request``, matched to a route (its resource's canonical path; the path when none
    matched, or matching it raised)."""
    method = request.method
    try:
        route_object = request.match_info.route
    except Exception:  # (no route: resolving it raised, an HTTPException or another; aiohttp asserts it is set)
        route_object = None
    found = spans.named.get((method, route_object))
    if found is not None:
        return found
    return new_label(spans, request, method, route_object)


def new_label(spans: ServerSpans, request: Any, method: str, route_object: object) -> tuple[str, str]:
    """``label_of`` for a (method, route object) not labelled before: kept for the next request of that route."""
    resource = getattr(route_object, "resource", None)
    if resource is None:  # (each request that matched none has a route object of its own: not kept)
        path = request.path
        return server_label(method, path), path
    route = resource.canonical
    found = server_label(method, route), route
    if len(spans.named) < _NAMED:
        spans.named[method, route_object] = found
    return found


#: The twins: in C where the recorder is built (a server's every request begins and ends a span).
begin: Callable[[ServerSpans, Any], ServerSpan | None] = begin_in_python
end: Callable[[ServerSpans, ServerSpan, Any, Any, BaseException | None], None] = end_in_python
if speedups is not None:
    speedups.configure_server_spans(new_label, error_text)
    begin, end = speedups.begin_server_span, speedups.end_server_span


def _recording(spans: ServerSpans, serve: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Any]:
    """``serve(first, request)`` (``Application._handle(self, request)``, say), each request in its span."""
    begin_span, end_span = begin, end  # (the twins chosen at import; locals: no global lookup a request)

    async def recorded(first: Any, request: Any) -> Any:
        span = begin_span(spans, request)
        if span is None:
            return await serve(first, request)
        try:
            result = await serve(first, request)
        except BaseException as exc:
            end_span(spans, span, request, None, exc)
            raise
        end_span(spans, span, request, result, None)
        return result

    return recorded


def _call(handler: _Handler, request: Any) -> Awaitable[Any]:
    return handler(request)


def middleware(timeline: Timeline) -> Callable[[Any, _Handler], Awaitable[Any]]:
    """An aiohttp middleware recording a server span per request into ``timeline`` (see the module's docstring):
    ``web.Application(middlewares=[middleware(tl)])``, for an application served where the integration is off."""
    recorded = _recording(_spans_of(timeline), _call)

    def ringtrace_server_span(request: Any, handler: _Handler) -> Awaitable[Any]:
        return recorded(handler, request)  # type: ignore[no-any-return]

    ringtrace_server_span.__middleware_version__ = 1  # type: ignore[attr-defined]  # what @web.middleware sets
    return ringtrace_server_span


def install(timeline: Timeline) -> None:
    """Record a span around each request every ``web.Application`` serves from now on."""
    application = sys.modules["aiohttp.web"].Application
    if not inspect.iscoroutinefunction(getattr(application, "_handle", None)):
        raise RuntimeError("aiohttp's web.Application._handle is not a coroutine function: this aiohttp is unknown")
    spans = _spans_of(timeline)
    patch(application, "_handle", lambda handle: _recording(spans, handle))
