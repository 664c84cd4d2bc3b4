"""A server span per HTTP request of an ASGI app: ``ASGIMiddleware`` for explicit use, and the apps of uvicorn,
hypercorn and gunicorn's ASGI worker wrapped in it with no code change.

The span continues the caller's trace (its ``traceparent`` in the request's headers), is labelled with the method
and the path, and holds ``method``, ``path`` and the ``response`` map (``status``, from the response's start; the
``route`` a framework matched, where it says so in the scope as Starlette and FastAPI do) as args. It lasts as long
as the app's call: a streamed response's last part is sent before the call returns. An exception from the app is
recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came. Websocket and lifespan
messages pass through untouched.

``install`` wraps, each once its module is imported: the app uvicorn loads (``uvicorn.Config.load``, which
``uvicorn.run``, ``uvicorn.Server``, uvicorn's command and its gunicorn worker all go through), outside uvicorn's own
middlewares; the ASGI app hypercorn serves (its ``ASGIWrapper``); the app gunicorn's own ASGI worker loads. Other
servers: wrap the app in ``ASGIMiddleware``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import error_text, patch, patch_servers, server_label
from ringtrace.client.recording.trace_context import serving

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["ASGIMiddleware", "install", "patch_gunicorn_asgi", "patch_hypercorn", "patch_uvicorn"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[Any]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ASGIMiddleware:
    """An ASGI 3 app that records a server span per HTTP request of ``app`` into ``timeline`` (see the module's
    docstring). Inside a server span (the same app wrapped twice, an app inside another) it records none."""

    def __init__(self, app: Callable[[_Scope, _Receive, _Send], Awaitable[None]], timeline: Timeline) -> None:
        self.app, self.timeline = app, timeline

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if serving():  # (an app inside another: one span a request)
            return await self.app(scope, receive, send)
        try:
            if scope.get("type") != "http":
                span = None
            else:
                method, path = scope.get("method", "GET"), scope.get("path", "")
                response: dict[str, Any] = {}
                span = self.timeline.server_span(
                    server_label(method, path), scope.get("headers") or (), method=method, path=path, response=response
                )
        except Exception:  # a scope we cannot read: the app serves it unrecorded
            span = None
        if span is None:
            return await self.app(scope, receive, send)

        async def send_noting_status(message: MutableMapping[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                response["status"] = message.get("status")
            await send(message)

        with span:
            try:
                await self.app(scope, receive, send_noting_status)
            except BaseException as exc:
                response["error"] = error_text(exc)
                raise
            finally:
                route = _route(scope)
                if route is not None:
                    response["route"] = route


def _route(scope: _Scope) -> str | None:
    """The route a framework matched, as it put it in the scope (Starlette's and FastAPI's ``scope["route"]``)."""
    try:
        matched = scope.get("route")
        path = getattr(matched, "path_format", None) or getattr(matched, "path", None)
        return path if type(path) is str else None
    except Exception:
        return None


def install(timeline: Timeline) -> None:
    """Wrap the apps of uvicorn, hypercorn and gunicorn's ASGI worker in ``ASGIMiddleware``: those imported now, and
    each of the others once it is."""
    patch_servers(
        timeline,
        "asgi",
        [
            ("uvicorn.config", patch_uvicorn),
            ("hypercorn.app_wrappers", patch_hypercorn),
            ("gunicorn.workers.gasgi", patch_gunicorn_asgi),
        ],
    )


def _wrapped(app: Any, timeline: Timeline) -> Any:
    return app if isinstance(app, ASGIMiddleware) else ASGIMiddleware(app, timeline)


def patch_uvicorn(timeline: Timeline) -> None:
    """Wrap every app uvicorn loads (``uvicorn.Config.load``)."""

    def make_load(load: Callable[[Any], None]) -> Callable[[Any], None]:
        def wrapped_load(self: Any) -> None:
            load(self)
            with contextlib.suppress(Exception):  # uvicorn changed: it serves unrecorded
                self.loaded_app = _wrapped(self.loaded_app, timeline)

        return wrapped_load

    patch(sys.modules["uvicorn.config"].Config, "load", make_load)


def patch_hypercorn(timeline: Timeline) -> None:
    """Wrap every ASGI app hypercorn serves (its ``ASGIWrapper``, under asyncio and trio alike)."""

    def make_init(init: Callable[..., None]) -> Callable[..., None]:
        def wrapped_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            with contextlib.suppress(Exception):  # hypercorn changed: it serves unrecorded
                self.app = _wrapped(self.app, timeline)

        return wrapped_init

    patch(sys.modules["hypercorn.app_wrappers"].ASGIWrapper, "__init__", make_init)


def patch_gunicorn_asgi(timeline: Timeline) -> None:
    """Wrap the app gunicorn's ASGI worker loads."""

    def make_load(load: Callable[[Any], None]) -> Callable[[Any], None]:
        def wrapped_load(self: Any) -> None:
            load(self)
            with contextlib.suppress(Exception):  # gunicorn changed: it serves unrecorded
                self.asgi = _wrapped(self.asgi, timeline)

        return wrapped_load

    patch(sys.modules["gunicorn.workers.gasgi"].ASGIWorker, "load_wsgi", make_load)
