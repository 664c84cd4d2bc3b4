"""A client span per request that ``httpx`` sends, sync or async, ``traceparent`` written into its headers.

``Client.send`` and ``AsyncClient.send`` are wrapped: every request of a client (``get``, ``stream``, ``request``;
``httpx.get`` makes a client) goes through them, whatever its transport, and each is a call (``ClientCall``). A
redirect that httpx follows (or an authentication's second try) is sent within the same call: the client's public
event hooks, to which the call adds ringtrace's the first time (a request hook, last, and a response hook, first: so
``client.event_hooks`` shows them), tell the call of each request and response, so that each request on the wire has
a span of its own and its own ``traceparent``: the first request's span lasts the call, the others are inside it,
one after the other. A span is labelled with the method and the host, and holds ``method``, ``url`` (without user
name, password, query or fragment) and the ``response`` map (``status``: its own request's) as args; the call's
spans end when ``send`` returns: with the body read, unless the call streams it. An exception is recorded on the
call's open spans (its type as ``exception``, its text as ``response.error``) and goes on as it came. httpx sends
through httpcore, which no integration patches: one span per request.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.hook_errors import count_failure
from ringtrace.client.integrations.http_spans import CLIENT_CALL, patch, wrap_async_client, wrap_client

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "httpx"


def _on_request(request: Any) -> None:
    """The request hook: a request of the call goes on the wire."""
    call = CLIENT_CALL.get()
    if call is not None and call.integration == _NAME:
        call.sending(request.method, request.url, request.headers)


def _on_response(response: Any) -> None:
    """The response hook: the open request's response."""
    call = CLIENT_CALL.get()
    if call is not None and call.integration == _NAME:
        call.status(response.status_code)


async def _on_request_async(request: Any) -> None:
    _on_request(request)


async def _on_response_async(response: Any) -> None:
    _on_response(response)


def _add_hooks(client: Any, on_request: Any, on_response: Any) -> None:
    """Ringtrace's hooks among ``client``'s, once. (Two threads sending first at once may add them twice: each
    hook said twice changes nothing.) Without them, a call's requests share its one span: counted, not raised."""
    try:
        hooks = client.event_hooks
        if on_request not in hooks["request"]:
            hooks["request"].append(on_request)  # last: the request as the program's hooks leave it
        if on_response not in hooks["response"]:
            hooks["response"].insert(0, on_response)  # first: the status is said before a hook raises for it
    except Exception as exc:
        count_failure(_NAME, exc)


def _request(client: Any, request: Any, **kwargs: Any) -> tuple[object, object, Any]:
    """``Client.send``'s request: its method, URL and headers (the client's hooks added first)."""
    _add_hooks(client, _on_request, _on_response)
    return request.method, request.url, request.headers


def _async_request(client: Any, request: Any, **kwargs: Any) -> tuple[object, object, Any]:
    """``AsyncClient.send``'s request: its method, URL and headers (the client's hooks added first)."""
    _add_hooks(client, _on_request_async, _on_response_async)
    return request.method, request.url, request.headers


def _status(response: Any) -> object:
    return getattr(response, "status_code", None)


def install(timeline: Timeline) -> None:
    """Wrap ``httpx.Client.send`` and ``httpx.AsyncClient.send``."""
    httpx = sys.modules["httpx"]
    patch(httpx.Client, "send", wrap_client(timeline, _NAME, _request, _status))
    patch(httpx.AsyncClient, "send", wrap_async_client(timeline, _NAME, _async_request, _status))
