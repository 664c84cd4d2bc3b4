"""A client span per request of an ``aiohttp.ClientSession``, ``traceparent`` written into its headers.

``ClientSession._request`` is wrapped: every request of a session (``get``, ``post``, ``request``, ``ws_connect``)
goes through it, redirects included: the hops it follows share the call's span and its ``traceparent``. The span is
labelled with the method and the host, and holds ``method``, ``url`` (without user name, password, query or
fragment) and the ``response`` map (``status``) as args; it ends when the response's headers are in (the body is
read after, by the program). An exception is recorded (its type as ``exception``, its text as ``response.error``)
and goes on as it came. The request's headers are sent as a copy with ``traceparent`` added: the caller's are left
as they are.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import CLIENT_CALL, client_label, error_text, patch, public_url

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "aiohttp-client"


def install(timeline: Timeline) -> None:
    """Wrap ``aiohttp.ClientSession._request``."""
    aiohttp = sys.modules["aiohttp"]
    headers_type = sys.modules["multidict"].CIMultiDict  # aiohttp's own, imported with it

    def make_request(request: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped_request(self: Any, method: Any, str_or_url: Any, *args: Any, **kwargs: Any) -> Any:
            if CLIENT_CALL.get() not in (None, _NAME):
                return await request(self, method, str_or_url, *args, **kwargs)
            try:
                headers = headers_type(kwargs.get("headers") or ())
                response: dict[str, Any] = {}
                span = timeline.client_span(
                    client_label(method, str_or_url), headers, method=method, url=public_url(str_or_url),
                    response=response,
                )  # fmt: skip
            except Exception:  # a request we cannot read: sent unrecorded
                return await request(self, method, str_or_url, *args, **kwargs)
            token = CLIENT_CALL.set(_NAME)
            try:
                with span:
                    kwargs["headers"] = headers  # with traceparent, written as the span began
                    try:
                        result = await request(self, method, str_or_url, *args, **kwargs)
                    except BaseException as exc:
                        response["error"] = error_text(exc)
                        raise
                    response["status"] = getattr(result, "status", None)
                    return result
            finally:
                CLIENT_CALL.reset(token)

        return wrapped_request

    patch(aiohttp.ClientSession, "_request", make_request)
