"""A client span per request that ``requests`` sends, ``traceparent`` written into its headers.

``Session.send`` is wrapped: every call of ``requests`` (``requests.get``, a ``Session``'s methods) goes through it,
and each redirect it follows is sent by it again, so each request on the wire has a span of its own (a redirect's
inside the first one's, as ``requests`` sends it from within the first call), and its own ``traceparent``. The span
is labelled with the method and the host, and holds ``method``, ``url`` (without user name, password, query or
fragment) and the ``response`` map (``status``: its own request's, said by a response hook that ringtrace puts first
among the prepared request's: a redirected call's first span has the redirect's) as args; it ends when ``send``
returns: with the body read, unless the call asked for ``stream=True``. An exception is recorded (its type as
``exception``, its text as ``response.error``) and goes on as it came. ``requests`` sends through urllib3, which no
integration patches: one span per request.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.hook_errors import count_failure
from ringtrace.client.integrations.http_spans import CLIENT_CALL, patch, wrap_client

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "requests"


def _on_response(response: Any, *args: Any, **kwargs: Any) -> None:
    """A response hook: the call's own request's status, said as its response comes (before a redirect is followed:
    a redirected call that fails has it too)."""
    call = CLIENT_CALL.get()
    if call is not None and call.integration == _NAME:
        call.status(getattr(response, "status_code", None))


def _request(session: Any, request: Any, **kwargs: Any) -> tuple[object, object, Any]:
    """``Session.send``'s prepared request: its method, URL and headers (its response hooks given ours first)."""
    read = request.method, request.url, request.headers
    try:
        hooks = request.hooks["response"]
        if _on_response not in hooks:
            hooks.insert(0, _on_response)  # first: the status is said before a hook raises for it
    except Exception as exc:  # a request with no hooks: its status is said as the call returns
        count_failure(_NAME, exc)
    return read


def _status(response: Any) -> object:
    """The status of the call's own request: a call that followed redirects returns the last one's response, and
    holds its own first in the history."""
    history = getattr(response, "history", None)
    return getattr(history[0] if history else response, "status_code", None)


def install(timeline: Timeline) -> None:
    """Wrap ``requests.Session.send``."""
    patch(sys.modules["requests"].Session, "send", wrap_client(timeline, _NAME, _request, _status))
