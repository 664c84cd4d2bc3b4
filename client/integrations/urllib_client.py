"""A client span per request that ``urllib.request`` sends over HTTP or HTTPS, ``traceparent`` written into it.

``AbstractHTTPHandler.do_open`` is wrapped: the HTTP and HTTPS handlers (and any subclass) send each request on the
wire through it, so ``urlopen`` and every opener record one span per request, each redirect a span of its own. The
span is labelled with the method and the host, and holds ``method``, ``url`` (without user name, password, query or
fragment) and the ``response`` map (``status``) as args; it ends when the response's headers are in (the body is read
after, by the program), and a status of 400 or more is recorded before urllib raises its ``HTTPError``. An exception
is recorded (its type as ``exception``, its text as ``response.error``) and goes on as it came. ``traceparent`` is an
unredirected header of the request: a redirect's request gets its own span's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import CLIENT_CALL, client_label, error_text, patch, public_url
from ringtrace.client.recording.trace_context import inject

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["install"]

_NAME = "urllib"


def install(timeline: Timeline) -> None:
    """Wrap ``urllib.request.AbstractHTTPHandler.do_open``."""

    def make_do_open(do_open: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped_do_open(self: Any, http_class: Any, req: Any, **http_conn_args: Any) -> Any:
            if CLIENT_CALL.get() not in (None, _NAME):
                return do_open(self, http_class, req, **http_conn_args)
            try:
                method, url = req.get_method(), req.full_url
                response: dict[str, Any] = {}
                span = timeline.client_span(
                    client_label(method, url), method=method, url=public_url(url), response=response
                )
            except Exception:  # a request we cannot read: sent unrecorded
                return do_open(self, http_class, req, **http_conn_args)
            token = CLIENT_CALL.set(_NAME)
            try:
                with span:
                    try:
                        fields: dict[str, str] = inject({}, span.context)
                        for name, value in fields.items():
                            req.add_unredirected_header(name.capitalize(), value)
                    except Exception:  # a request that takes no header: sent without
                        pass
                    try:
                        result = do_open(self, http_class, req, **http_conn_args)
                    except BaseException as exc:
                        response["error"] = error_text(exc)
                        raise
                    response["status"] = getattr(result, "status", None)
                    return result
            finally:
                CLIENT_CALL.reset(token)

        return wrapped_do_open

    patch(sys.modules["urllib.request"].AbstractHTTPHandler, "do_open", make_do_open)
