"""What the HTTP integrations share: the spans' labels and args, the URL as recorded (no secrets), one server span per
request, a client call's spans (``ClientCall``: one per request on the wire) and the wrapper that records a client
library's sending function as a call, and patching a library's function so that it keeps its signature.

A span's status is known only when the response starts, after the span began, and a span's args are fixed when it
begins: so each span has a ``response`` map among its args, filled in before it ends (``status``; ``error``, the
exception's text, when one ends it). The exception's type is the span's ``exception`` arg, as for any scope.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ringtrace.client.integrations.hook_errors import count_failure

__all__ = [
    "CLIENT_CALL",
    "ClientCall",
    "begin_call",
    "client_label",
    "error_text",
    "patch",
    "patch_servers",
    "public_url",
    "server_label",
    "status_of",
    "wrap_async_client",
    "wrap_client",
]

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline
    from ringtrace.client.recording.trace_context import TraceScope

_log = logging.getLogger("ringtrace.client")
_F = TypeVar("_F", bound=Callable[..., Any])

#: The client call open (``ClientCall``): another library it sends through records no second span of the call.
CLIENT_CALL: Final[contextvars.ContextVar[ClientCall | None]] = contextvars.ContextVar(
    "ringtrace_client_call", default=None
)
#: Longer error texts are cut: an arg is for reading, not for holding a response body.
_MAX_ERROR: Final = 200
#: URLs whose split is kept (``_split``).
_URLS_KEPT: Final = 1024
#: The attribute a patched function carries: installing twice wraps once.
_PATCHED: Final = "__ringtrace_patched__"


def public_url(url: object) -> str:
    """``url`` as recorded: scheme, host, port and path; no user name or password, no query (it may hold a token or
    a signature), no fragment; ``""`` for one that cannot be read."""
    try:
        return _split(str(url))[1]
    except Exception:
        return ""


def client_label(method: object, url: object) -> str:
    """A client span's label: the method and the host (``GET example.com:8080``); the path is in its args, so that
    labels stay few."""
    try:
        return f"{method} {_split(str(url))[0]}"
    except Exception:
        return str(method)


@functools.lru_cache(maxsize=_URLS_KEPT)
def _split(url: str) -> tuple[str, str]:
    """The host (and port) of ``url``, and ``url`` as recorded: kept for the URLs a program calls again and again,
    since splitting one costs a few microseconds."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return netloc, urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def server_label(method: object, route: object) -> str:
    """A server span's label: the method and the route (the matched pattern where the framework says it, else the
    path)."""
    return f"{method} {route}"


def status_of(status_line: object) -> int | None:
    """The status code of a WSGI status line (``"404 Not Found"``), or of a code as it is."""
    if type(status_line) is int:
        return status_line
    try:
        return int(str(status_line).split(None, 1)[0])
    except Exception:
        return None


def error_text(exc: BaseException) -> str:
    """An exception's text, cut to a few hundred characters."""
    try:
        text = str(exc)
    except Exception:
        return ""
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"


def patch(owner: object, name: str, make_wrapper: Callable[[_F], _F]) -> None:
    """Replace ``owner.name`` by ``make_wrapper(original)`` (which should keep its signature with
    ``functools.wraps``), once: a second install finds it patched and leaves it."""
    original = getattr(owner, name)
    if getattr(original, _PATCHED, False):
        return
    wrapper = make_wrapper(original)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, _PATCHED, True)
    setattr(owner, name, wrapper)


def patch_servers(
    timeline: Timeline, integration: str, patchers: Sequence[tuple[str, Callable[[Timeline], None]]]
) -> None:
    """Call each ``(module, patcher)``'s patcher with ``timeline``: now if its server's module is imported, else once
    it is (the integration applied for the first of its modules: the others wait for their own)."""
    from ringtrace.client.integrations.registry import Integration, apply

    for module, patcher in patchers:
        if module in sys.modules:
            try:
                patcher(timeline)
            except Exception as exc:  # one server's patch failing leaves the others': said once, not raised
                _log.warning("ringtrace: the %s integration is off under %s: %r", integration, module, exc)
        else:
            name = f"{integration}:{module}"
            install = f"{patcher.__module__}:{patcher.__name__}"
            waiting = Integration(name, f"the {integration} integration under {module}", (module,), install)
            apply(timeline, {name}, [waiting])


class ClientCall:
    """One call of an HTTP client library (``Session.send``, say): a client span per request it sends on the wire, each
    with ``traceparent`` naming it written into that request's headers, all in one trace. The first request's span
    lasts the whole call; a request after it (a redirect's, an authentication's second try) is a span inside it, begun
    as the one before it ends: the shape ``requests`` gives its redirects, which it sends from within the first call.
    ``CLIENT_CALL`` holds the call until it ends.

    ``begin_call`` makes one; the integration's hooks then say what happens, in the call's thread or task: ``sending``
    or ``hop`` (another request), ``status`` (a response), ``end``. None of them raises: a failure inside is counted
    (``hook_errors``), and the call goes on unrecorded past it.
    """

    __slots__ = ("_answered", "_first", "_hop", "_timeline", "_token", "integration")

    def __init__(self, timeline: Timeline, integration: str, method: object, url: object, headers: Any) -> None:
        #: The integration's name (its switch), for ``hook_errors`` and for ``CLIENT_CALL``'s readers.
        self.integration = integration
        self._timeline = timeline
        #: The first request's span and its ``response`` arg; the open one of the requests after it, if any.
        self._first = self._begin(method, url, headers)
        self._hop: tuple[TraceScope, dict[str, Any]] | None = None
        #: Whether the open request has its response: the next one a hook says is sent is another request.
        self._answered = False
        self._token = CLIENT_CALL.set(self)

    def _begin(self, method: object, url: object, headers: Any) -> tuple[TraceScope, dict[str, Any]]:
        response: dict[str, Any] = {}
        try:  # (client_label and public_url, with one split of the URL)
            host, recorded = _split(str(url))
            label = f"{method} {host}"
        except Exception:
            label, recorded = str(method), ""
        span = self._timeline.client_span(label, headers, method=method, url=recorded, response=response)
        span.__enter__()
        return span, response

    @staticmethod
    def _end(span: TraceScope, response: dict[str, Any], exc: BaseException | None) -> None:
        if exc is None:
            span.__exit__(None, None, None)
        else:
            response["error"] = error_text(exc)
            span.__exit__(type(exc), exc, exc.__traceback__)

    def sending(self, method: object, url: object, headers: Any) -> None:
        """A hook that runs before each request goes on the wire says it: the call's first request is the one it
        began with; one after a response is another (``hop``). (A hook said twice for one request changes nothing.)"""
        if self._answered:
            self.hop(method, url, headers)

    def hop(self, method: object, url: object, headers: Any) -> None:
        """Another request of the call: the span of the one before it ends (unless it is the first), this one's
        begins, ``traceparent`` naming it written into ``headers`` (the request's own, or what ``inject`` can write
        into)."""
        try:
            hop, self._hop, self._answered = self._hop, None, False
            if hop is not None:
                self._end(*hop, None)
            self._hop = self._begin(method, url, headers)
        except Exception as exc:
            count_failure(self.integration, exc)

    def status(self, status: object) -> None:
        """The status of the open request's response."""
        (self._hop or self._first)[1]["status"] = status
        self._answered = True

    def end(self, exc: BaseException | None = None, status: object = None) -> None:
        """The call is over: it returned (``status``, if said, is its last request's) or raised ``exc`` (recorded on
        the first request's span and on the last's, as the exception went through both)."""
        try:
            if status is not None:
                (self._hop or self._first)[1]["status"] = status
            hop, self._hop = self._hop, None
            if hop is not None:
                self._end(*hop, exc)
            self._end(*self._first, exc)
        except Exception as failure:
            count_failure(self.integration, failure)
        # (ended in another context than it began in, or twice: nothing of it to undo here)
        with contextlib.suppress(ValueError, RuntimeError):
            CLIENT_CALL.reset(self._token)


def begin_call(timeline: Timeline, integration: str, method: object, url: object, headers: Any) -> ClientCall | None:
    """A call of ``integration``'s library begins, its first request's span with it (``ClientCall``). None: another
    integration's call is open (this library is sent through by it: its span is the request's), or the span could not
    begin (the failure counted: the call goes unrecorded)."""
    if _sent_through(integration):
        return None
    try:
        return ClientCall(timeline, integration, method, url, headers)
    except Exception as exc:
        count_failure(integration, exc)
        return None


def _sent_through(integration: str) -> bool:
    """Whether another integration's call is open: the library is sent through by it."""
    outer = CLIENT_CALL.get()
    return outer is not None and outer.integration != integration


#: ``read(*args, **kwargs)`` of a sending function's arguments: the request's method, its URL, and where
#: ``traceparent`` is written (its headers, or an object whose ``[name] = value`` sets a header).
RequestReader = Callable[..., tuple[object, object, Any]]
#: ``status(result)`` of what a sending function returned: its request's response status.
StatusReader = Callable[[Any], object]


def _begin_reading(
    timeline: Timeline, integration: str, read: RequestReader, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> ClientCall | None:
    if _sent_through(integration):  # (nothing read: nothing to fail at)
        return None
    try:
        method, url, headers = read(*args, **kwargs)
    except Exception as exc:  # a request we cannot read: sent unrecorded
        count_failure(integration, exc)
        return None
    return begin_call(timeline, integration, method, url, headers)


def _end_returned(call: ClientCall, status: StatusReader, result: object) -> None:
    try:
        said = status(result)
    except Exception as exc:
        count_failure(call.integration, exc)
        said = None
    call.end(status=said)


def wrap_client(
    timeline: Timeline, integration: str, read: RequestReader, status: StatusReader
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """For ``patch``: a library's function that sends a request, recorded as a call (``ClientCall``) that ends as it
    returns or raises. What it raises goes on as it came; what the recording fails at is counted, never raised."""

    def make(send: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            call = _begin_reading(timeline, integration, read, args, kwargs)
            if call is None:
                return send(*args, **kwargs)
            try:
                result = send(*args, **kwargs)
            except BaseException as exc:
                call.end(exc)
                raise
            _end_returned(call, status, result)
            return result

        return wrapped

    return make


def wrap_async_client(
    timeline: Timeline, integration: str, read: RequestReader, status: StatusReader
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """``wrap_client`` for a coroutine function."""

    def make(send: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            call = _begin_reading(timeline, integration, read, args, kwargs)
            if call is None:
                return await send(*args, **kwargs)
            try:
                result = await send(*args, **kwargs)
            except BaseException as exc:
                call.end(exc)
                raise
            _end_returned(call, status, result)
            return result

        return wrapped

    return make
