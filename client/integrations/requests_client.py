"""A client span per request that ``requests`` sends, ``traceparent`` written into its headers.

``Session.send`` is wrapped: every call of ``requests`` (``requests.get``, a ``Session``'s methods) goes through it,
and each redirect it follows is sent by it again, so each request on the wire has a span of its own (a redirect's
inside the first one's). The span is labelled with the method and the host, and holds ``method``, ``url`` (without
user name, password, query or fragment) and the ``response`` map (``status``) as args; it ends when ``send``
returns: with the body read, unless the call asked for ``stream=True``. An exception is recorded (its type as
``exception``, its text as ``response.error``) and goes on as it came. ``requests`` sends through urllib3, which no
integration patches: one span per request.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import CLIENT_CALL, client_label, error_text, patch, public_url

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "requests"


def install(timeline: Timeline) -> None:
    """Wrap ``requests.Session.send``."""

    def make_send(send: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped_send(self: Any, request: Any, **kwargs: Any) -> Any:
            if CLIENT_CALL.get() not in (None, _NAME):
                return send(self, request, **kwargs)
            try:
                method, url = request.method, request.url
                response: dict[str, Any] = {}
                span = timeline.client_span(
                    client_label(method, url), request.headers, method=method, url=public_url(url), response=response
                )
            except Exception:  # a request we cannot read: sent unrecorded
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

    patch(sys.modules["requests"].Session, "send", make_send)
