"""The library integrations that recording with no code change turns on, and the import hook that applies each one
only once the program has imported its library.

An integration is named by its switch (``ringtrace run --no-NAME``), and found by the ``module:function`` path of its
install function: nothing of it is imported until it applies, so a program that never imports ``requests`` never
loads ringtrace's ``requests`` integration either, nor ``requests`` itself. ``apply`` installs at once those whose
library is already imported (or that need none), and watches imports for the others: a finder first on
``sys.meta_path`` wraps the loader of a watched module, and installs the integration right after the module has run.
An install that fails is logged once and counted; it never raises into the program.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Final

from ringtrace.client.recording.import_watch import spec_with_loader

if TYPE_CHECKING:
    import importlib.abc

    from ringtrace.client.recording.timelines import Timeline

__all__ = ["INTEGRATIONS", "Integration", "applied", "apply", "failed"]

_log = logging.getLogger("ringtrace.client")


@dataclass(frozen=True)
class Integration:
    """One library integration."""

    #: Its switch: ``--no-NAME`` turns it off.
    name: str
    #: One line for ``--help`` and the docs.
    summary: str
    #: Installed once any of these modules has been imported; none: at once.
    modules: tuple[str, ...]
    #: ``"module:function"``: the function, called with the timeline, that installs it (idempotent).
    install: str


_HERE = "ringtrace.client.integrations"
#: Every integration, in the order they are installed.
INTEGRATIONS: Final[tuple[Integration, ...]] = (
    Integration(
        "logging",
        "log records as messages, at the priority of their level",
        ("logging",),
        f"{_HERE}.logging_records:install",
    ),
    Integration("exceptions", "an uncaught exception as an instant", (), f"{_HERE}.uncaught_exceptions:install"),
    Integration("gc", "a span per garbage collection", (), f"{_HERE}.gc_pauses:install"),
    Integration(
        "asgi",
        "a server span per request of an ASGI app that uvicorn, hypercorn or gunicorn serves",
        ("uvicorn.config", "hypercorn.app_wrappers", "gunicorn.workers.gasgi"),
        f"{_HERE}.asgi_server:install",
    ),
    Integration(
        "wsgi",
        "a server span per request of a WSGI app that wsgiref, werkzeug, gunicorn or waitress serves",
        ("wsgiref.handlers", "werkzeug.serving", "gunicorn.workers.base", "waitress.server"),
        f"{_HERE}.wsgi_server:install",
    ),
    Integration(
        "aiohttp-server",
        "a server span per request of aiohttp's server",
        ("aiohttp.web",),
        f"{_HERE}.aiohttp_server:install",
    ),
    Integration(
        "requests",
        "a client span per request of requests, traceparent sent",
        ("requests",),
        f"{_HERE}.requests_client:install",
    ),
    Integration(
        "httpx",
        "a client span per request of httpx (sync and async), traceparent sent",
        ("httpx",),
        f"{_HERE}.httpx_client:install",
    ),
    Integration(
        "aiohttp-client",
        "a client span per request of aiohttp's ClientSession, traceparent sent",
        ("aiohttp",),
        f"{_HERE}.aiohttp_client:install",
    ),
    Integration(
        "urllib",
        "a client span per request of urllib.request, traceparent sent",
        ("urllib.request",),
        f"{_HERE}.urllib_client:install",
    ),
)

_lock = threading.Lock()
_applied: list[str] = []
_failed: dict[str, str] = {}
#: Watched module name -> integrations waiting for it.
_waiting: dict[str, list[tuple[Integration, Timeline]]] = {}


def applied() -> list[str]:
    """The names of the integrations installed so far, in order."""
    with _lock:
        return list(_applied)


def failed() -> dict[str, str]:
    """Integration name -> why its install failed."""
    with _lock:
        return dict(_failed)


def apply(timeline: Timeline, enabled: Collection[str], integrations: Sequence[Integration] = INTEGRATIONS) -> None:
    """Install each integration of ``integrations`` named in ``enabled`` now, or once its library is imported."""
    for integration in integrations:
        if integration.name not in enabled:
            continue
        imported = [name for name in integration.modules if name in sys.modules]
        if not integration.modules or imported:
            _install(integration, timeline)
            continue
        with _lock:
            for name in integration.modules:
                _waiting.setdefault(name, []).append((integration, timeline))
            if not any(isinstance(finder, _ImportWatcher) for finder in sys.meta_path):
                sys.meta_path.insert(0, _ImportWatcher())


def _install(integration: Integration, timeline: Timeline) -> None:
    with _lock:
        if integration.name in _applied or integration.name in _failed:
            return
        _applied.append(integration.name)  # taken before it runs: an import it makes does not install it again
    try:
        module_name, _, function_name = integration.install.partition(":")
        install: Callable[[Timeline], None] = getattr(importlib.import_module(module_name), function_name)
        install(timeline)
    except Exception as exc:  # an integration never breaks the program: it is left out, and said once
        with _lock:
            _applied.remove(integration.name)
            _failed[integration.name] = f"{type(exc).__name__}: {exc}"
        _log.warning("ringtrace: the %s integration is off: it failed to install: %r", integration.name, exc)


def _imported(name: str) -> None:
    """Called once the watched module ``name`` has run: install what waits for it."""
    with _lock:
        waiting = _waiting.pop(name, [])
    for integration, timeline in waiting:
        _install(integration, timeline)


class _ImportWatcher:
    """First on ``sys.meta_path``: finds a watched module with the finders after it, and wraps its loader. (Neither
    class derives from ``importlib.abc``'s: importing that loads ``importlib.resources``, at every start.)"""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        return spec_with_loader(self, fullname, path, target, lambda _module: _imported(fullname))
