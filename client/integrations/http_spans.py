"""What the HTTP integrations share: the spans' labels and args, the URL as recorded (no secrets), one server span per
request and one client span per call, and patching a library's function so that it keeps its signature.

A span's status is known only when the response starts, after the span began, and a span's args are fixed when it
begins: so each span has a ``response`` map among its args, filled in before it ends (``status``; ``error``, the
exception's text, when one ends it). The exception's type is the span's ``exception`` arg, as for any scope.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "CLIENT_CALL",
    "SERVING",
    "client_label",
    "error_text",
    "patch",
    "patch_servers",
    "public_url",
    "server_label",
    "status_of",
]

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

_log = logging.getLogger("ringtrace.client")
_F = TypeVar("_F", bound=Callable[..., Any])

#: Set while an integration's server span is open: an app inside another (a sub-application, middleware given
#: explicitly under a patched server) records no second span for the same request.
SERVING: Final[contextvars.ContextVar[bool]] = contextvars.ContextVar("ringtrace_serving", default=False)
#: The integration whose client span is open: another library it calls through records no second span of the call.
CLIENT_CALL: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar("ringtrace_client_call", default=None)
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
