"""A client span per request that ``requests`` sends, ``traceparent`` written into its headers.

``Session.send`` is wrapped: every call of ``requests`` (``requests.get``, a ``Session``'s methods) goes through it,
and each redirect it follows is sent by it again, so each request on the wire has a span of its own (a redirect's
inside the first one's, as ``requests`` sends it from within the first call), and its own ``traceparent``. The span
is labelled with the method and the host, and holds ``method``, ``url`` (without user name, password, query or
fragment) and the ``response`` map (``status``: its own request's, the redirect's for the first of a redirected call)
as args; it ends when ``send`` returns: with the body read, unless the call asked for ``stream=True``. An exception is
recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came. ``requests`` sends
through urllib3, which no integration patches: one span per request.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import patch, wrap_client

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "requests"


def _request(session: Any, request: Any, **kwargs: Any) -> tuple[object, object, Any]:
    """``Session.send``'s prepared request: its method, URL and headers."""
    return request.method, request.url, request.headers


def _status(response: Any) -> object:
    """The status of the call's own request: a call that followed redirects returns the last one's response, and
    holds its own first in the history."""
    history = getattr(response, "history", None)
    return getattr(history[0] if history else response, "status_code", None)


def install(timeline: Timeline) -> None:
    """Wrap ``requests.Session.send``."""
    patch(sys.modules["requests"].Session, "send", wrap_client(timeline, _NAME, _request, _status))
