"""A client span per request that ``httpx`` sends, sync or async, ``traceparent`` written into its headers.

``Client.send`` and ``AsyncClient.send`` are wrapped: every request of a client (``get``, ``stream``, ``request``;
``httpx.get`` makes a client) goes through them, whatever its transport. A redirect that httpx follows is sent within
the same call: its hops share the call's span, and its ``traceparent``. The span is labelled with the method and the
host, and holds ``method``, ``url`` (without user name, password, query or fragment) and the ``response`` map
(``status``: the last hop's) as args; it ends when ``send`` returns: with the body read, unless the call streams it.
An exception is recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came. httpx
sends through httpcore, which no integration patches: one span per call.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import CLIENT_CALL, client_label, error_text, patch, public_url

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline
    from ringtrace.client.recording.trace_context import TraceScope

__all__ = ["install"]

_NAME = "httpx"


def _span(timeline: Timeline, request: Any, response: dict[str, Any]) -> TraceScope | None:
    """The request's span, or None if it cannot be read (sent unrecorded)."""
    if CLIENT_CALL.get() not in (None, _NAME):
        return None
    try:
        method, url = request.method, request.url
        return timeline.client_span(
            client_label(method, url), request.headers, method=method, url=public_url(url), response=response
        )
    except Exception:
        return None


def install(timeline: Timeline) -> None:
    """Wrap ``httpx.Client.send`` and ``httpx.AsyncClient.send``."""
    httpx = sys.modules["httpx"]

    def make_send(send: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped_send(self: Any, request: Any, **kwargs: Any) -> Any:
            response: dict[str, Any] = {}
            span = _span(timeline, request, response)
            if span is None:
                return send(self, request, **kwargs)
            token = CLIENT_CALL.set(_NAME)
            try:
                with span:
                    try:
                        result = send(self, request, **kwargs)
                    except BaseException as exc:
                        response["error"] = error_text(exc)
                        raise
                    response["status"] = getattr(result, "status_code", None)
                    return result
            finally:
                CLIENT_CALL.reset(token)

        return wrapped_send

    def make_async_send(send: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped_send(self: Any, request: Any, **kwargs: Any) -> Any:
            response: dict[str, Any] = {}
            span = _span(timeline, request, response)
            if span is None:
                return await send(self, request, **kwargs)
            token = CLIENT_CALL.set(_NAME)
            try:
                with span:
                    try:
                        result = await send(self, request, **kwargs)
                    except BaseException as exc:
                        response["error"] = error_text(exc)
                        raise
                    response["status"] = getattr(result, "status_code", None)
                    return result
            finally:
                CLIENT_CALL.reset(token)

        return wrapped_send

    patch(httpx.Client, "send", make_send)
    patch(httpx.AsyncClient, "send", make_async_send)
