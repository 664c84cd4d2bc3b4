"""A server span per request of aiohttp's server: ``middleware(timeline)`` for explicit use, and put first among the
middlewares of every ``aiohttp.web.Application`` made once ``aiohttp.web`` is imported.

The span continues the caller's trace (its ``traceparent``), is labelled with the method and the route (the matched
resource's canonical path, ``/users/{id}``; the path when none matched), and holds ``method``, ``path``, ``route``
and the ``response`` map (``status``: the response's, or the raised ``HTTPException``'s) as args. It lasts as long as
the handler: a streamed response is written before the handler returns it. An exception from the handler is
recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came; but an ``HTTPException``
below 500 (``HTTPNotFound``, a redirect) is aiohttp's way to answer, recorded as its status alone. A sub-application's
middleware, inside the main application's, records no second span.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from ringtrace.client.integrations.http_spans import SERVING, error_text, patch, server_label
from ringtrace.client.recording.trace_context import new_trace_scope

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install", "middleware"]

_Handler = Callable[[Any], Awaitable[Any]]
#: The (method, route) pairs whose label a middleware keeps: a server's routes and methods, with room to spare.
_NAMED: Final = 4096
_serving = SERVING.get


def middleware(timeline: Timeline) -> Callable[[Any, _Handler], Awaitable[Any]]:
    """An aiohttp middleware recording a server span per request into ``timeline`` (see the module's docstring):
    ``web.Application(middlewares=[middleware(tl)])``."""

    answers = getattr(sys.modules.get("aiohttp.web"), "HTTPException", ())  # (aiohttp's: raised, it is a response)
    # The label and the route of each (method, matched route) seen: a server's routes are few and fixed once it
    # serves, and reading a route's pattern and formatting the label cost a request about a microsecond.
    named: dict[tuple[str, object], tuple[str, str]] = {}
    scope_of = timeline._scope_of  # (what ``Timeline.server_span`` makes its span with: one call less a request)

    async def ringtrace_server_span(request: Any, handler: _Handler) -> Any:
        if _serving():
            return await handler(request)
        try:
            method = request.method
            route_object = request.match_info.route
            found = named.get((method, route_object))
            if found is not None:
                label, route = found
                path = request.path
            else:
                label, route, path = _name(method, route_object, request.path, named)
            response: dict[str, Any] = {}
            span = new_trace_scope(
                scope_of,
                label,
                "server",
                request.headers,
                {"method": method, "path": path, "route": route, "response": response},
            )
        except Exception:  # a request we cannot read: the handler serves it unrecorded
            return await handler(request)
        token = SERVING.set(True)
        try:
            span.__enter__()
            try:
                result = await handler(request)
            except BaseException as exc:
                status = getattr(exc, "status", None) if isinstance(exc, answers) else None
                if type(status) is int:  # (not another exception's status: an upstream's, say, answered with a 500)
                    response["status"] = status
                if type(status) is int and status < 500:  # (a 404 or a redirect, raised: an answer, not an error)
                    span.__exit__(None, None, None)
                else:
                    response["error"] = error_text(exc)
                    span.__exit__(type(exc), exc, exc.__traceback__)
                raise
            response["status"] = getattr(result, "status", None)
            span.__exit__(None, None, None)
            return result
        finally:
            SERVING.reset(token)

    ringtrace_server_span.__middleware_version__ = 1  # type: ignore[attr-defined]  # what @web.middleware sets
    return ringtrace_server_span


def _name(
    method: str, route_object: object, path: str, named: dict[tuple[str, object], tuple[str, str]]
) -> tuple[str, str, str]:
    """The label and the route of a request of ``method`` matched to ``route_object`` (its resource's canonical
    path; ``path`` when none matched), kept in ``named`` for a route of a resource (a request matching none has a
    route of its own), which holds at most ``_NAMED`` of them."""
    resource = getattr(route_object, "resource", None)
    if resource is None:
        return server_label(method, path), path, path
    route = resource.canonical
    label = server_label(method, route)
    if len(named) < _NAMED:
        named[method, route_object] = (label, route)
    return label, route, path


def install(timeline: Timeline) -> None:
    """Put the middleware first in every ``web.Application`` made from now on."""
    application = sys.modules["aiohttp.web"].Application
    first = middleware(timeline)

    def make_init(init: Callable[..., None]) -> Callable[..., None]:
        def wrapped_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            try:
                if first not in self._middlewares:
                    self._middlewares.insert(0, first)
            except Exception:  # aiohttp changed: it serves unrecorded
                pass

        return wrapped_init

    patch(application, "__init__", make_init)
