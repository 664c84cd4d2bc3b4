"""A client span per request of an ``aiohttp.ClientSession``, ``traceparent`` written into its headers.

Through aiohttp's public tracing hooks: ``ClientSession.__init__`` is wrapped to add ringtrace's ``TraceConfig`` to
the session's ``trace_configs`` (a copy of the list given: the caller's is left as it is), so every request of every
session (``get``, ``post``, ``request``, ``ws_connect``; ``aiohttp.request`` makes a session) is a call
(``ClientCall``): ``on_request_start`` begins it, ``on_request_end`` and ``on_request_exception`` end it. A redirect
that aiohttp follows is a request of its own, with its own span and ``traceparent``: ``on_request_redirect`` records
the redirect's status and begins the next request's span (its method and URL as aiohttp derives them from the
response's ``Location``), writing its ``traceparent`` into the headers aiohttp sends it with. The first request's span
lasts the call, the others are inside it, one after the other. (A redirect past ``max_redirects`` is never sent: its
span ends at once with aiohttp's ``TooManyRedirects``.) A span is labelled with the method and the host, and holds
``method``, ``url`` (without user name, password, query or fragment) and the ``response`` map (``status``: its own
request's) as args; the call's spans end when the last response's headers are in (the body is read after, by the
program). An exception is recorded on the call's open spans (its type as ``exception``, its text as
``response.error``) and goes on as it came. ``traceparent`` goes into the headers aiohttp merges for the request (its
own copy): the caller's are left as they are.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.hook_errors import count_failure
from ringtrace.client.integrations.http_spans import ClientCall, begin_call, patch

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "aiohttp-client"
#: The attribute of a request's trace context (aiohttp's, one per request and config) that holds its call.
_CALL = "ringtrace_call"
#: The statuses aiohttp follows, and the method it sends the next request with (RFC 9110 15.4; as aiohttp does).
_GET_AFTER_303_UNLESS_HEAD, _GET_AFTER_POST = 303, (301, 302)


def _redirected(method: str, url: Any, response: Any) -> tuple[str, Any] | None:
    """The method and URL of the request a redirect asks for, as aiohttp derives them; None where it sends none (no
    ``Location``, or not to HTTP)."""
    location = response.headers.get("Location") or response.headers.get("URI")
    if location is None:
        return None
    target = url.join(type(url)(location))
    if target.scheme not in ("http", "https"):
        return None
    status = response.status
    if (status == _GET_AFTER_303_UNLESS_HEAD and method != "HEAD") or (status in _GET_AFTER_POST and method == "POST"):
        method = "GET"
    return method, target


def install(timeline: Timeline) -> None:
    """Wrap ``aiohttp.ClientSession.__init__`` to add ringtrace's ``TraceConfig`` to each session."""
    aiohttp = sys.modules["aiohttp"]

    async def on_request_start(session: Any, context: Any, params: Any) -> None:
        setattr(context, _CALL, begin_call(timeline, _NAME, params.method, params.url, params.headers))

    async def on_request_redirect(session: Any, context: Any, params: Any) -> None:
        call: ClientCall | None = getattr(context, _CALL, None)
        if call is None:
            return
        try:
            call.status(params.response.status)
            following = _redirected(params.method, params.url, params.response)
        except Exception as exc:
            count_failure(_NAME, exc)
            return
        if following is not None:  # (else aiohttp goes no further: the open span ends with the call)
            call.hop(*following, params.headers)

    async def on_request_end(session: Any, context: Any, params: Any) -> None:
        call: ClientCall | None = getattr(context, _CALL, None)
        if call is not None:
            call.end(status=getattr(params.response, "status", None))

    async def on_request_exception(session: Any, context: Any, params: Any) -> None:
        call: ClientCall | None = getattr(context, _CALL, None)
        if call is not None:
            call.end(params.exception)

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    config.on_request_redirect.append(on_request_redirect)
    config.on_request_end.append(on_request_end)
    config.on_request_exception.append(on_request_exception)
    config.freeze()

    def make_init(init: Callable[..., None]) -> Callable[..., None]:
        def wrapped_init(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or ()), config]
            except Exception as exc:  # trace_configs that are no list: the session goes unrecorded
                count_failure(_NAME, exc)
            init(self, *args, **kwargs)

        return wrapped_init

    patch(aiohttp.ClientSession, "__init__", make_init)
