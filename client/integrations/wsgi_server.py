"""A server span per request of a WSGI app: ``WSGIMiddleware`` for explicit use, and the apps of wsgiref's,
werkzeug's, gunicorn's and waitress's servers wrapped in it with no code change.

The span continues the caller's trace (``HTTP_TRACEPARENT`` in the environ), is labelled with the method and the
path, and holds ``method``, ``path`` and the ``response`` map (``status``, from ``start_response``) as args. It ends
when the response does: at once for a body the app returns as a list or tuple (whole already), else when the server
closes the body the app returned (or has read it to its end). A body that is a list, a tuple or the server's
``wsgi.file_wrapper`` is passed on as it came, the span ended at once, so that the server handles it as before
(wsgiref sets ``Content-Length`` for a one-part list; a file is sent with ``sendfile``).
An exception from the app, or from its body while the server reads it, is recorded (its type as ``exception``, its
text as ``response.error``) and goes on as it came.

``install`` wraps, each once its module is imported: the app of every request ``wsgiref.handlers.BaseHandler.run``
runs (wsgiref's simple server, Django's ``runserver``, CGI), the app werkzeug's development server is made with
(``werkzeug.serving``: ``flask run``, ``run_simple``), the app gunicorn's WSGI workers load (sync, gthread, gevent,
eventlet: ``gunicorn.workers.base``) and the app of every waitress server (``waitress.server``). Other servers: wrap
the app in ``WSGIMiddleware``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ringtrace.client.integrations.http_spans import error_text, patch, patch_servers, server_label, status_of
from ringtrace.client.recording.trace_context import serving

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline
    from ringtrace.client.recording.trace_context import TraceScope

__all__ = ["WSGIMiddleware", "install", "patch_gunicorn", "patch_waitress", "patch_werkzeug", "patch_wsgiref"]

_App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: Gunicorn's workers that serve a WSGI app (its ASGI worker, uvicorn's, and others' serve an ASGI app, or their own).
_GUNICORN_WSGI_WORKERS = frozenset(
    ("gunicorn.workers.sync", "gunicorn.workers.gthread", "gunicorn.workers.ggevent", "gunicorn.workers.geventlet")
)


class WSGIMiddleware:
    """A WSGI app that records a server span per request of ``app`` into ``timeline`` (see the module's docstring).
    Inside a server span (the same app wrapped twice, an app inside another) it records none."""

    def __init__(self, app: _App, timeline: Timeline) -> None:
        self.app, self.timeline = app, timeline

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if serving():  # (an app inside another: one span a request)
            return self.app(environ, start_response)
        try:
            method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
            response: dict[str, Any] = {}
            traceparent = environ.get("HTTP_TRACEPARENT")  # read here: extract() would look through every key
            caller = (
                None
                if traceparent is None
                else {"traceparent": traceparent, "tracestate": environ.get("HTTP_TRACESTATE")}
            )
            span = self.timeline.server_span(
                server_label(method, path), caller, method=method, path=path, response=response
            )
        except Exception:  # an environ we cannot read: the app serves it unrecorded
            return self.app(environ, start_response)

        def start_noting_status(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            response["status"] = status_of(status)
            return start_response(status, headers, *exc_info)

        span.__enter__()
        try:
            body = self.app(environ, start_noting_status)
        except BaseException as exc:
            response["error"] = error_text(exc)
            span.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if isinstance(body, (list, tuple)) or _is_file_wrapper(body, environ):
            span.__exit__(None, None, None)
            return body
        return _BodyInSpan(body, span, response)


def _is_file_wrapper(body: object, environ: dict[str, Any]) -> bool:
    file_wrapper = environ.get("wsgi.file_wrapper")
    try:
        return isinstance(file_wrapper, type) and isinstance(body, file_wrapper)
    except Exception:
        return False


class _BodyInSpan:
    """The body an app returned, read through: the span ends when the server closes it (or has read it all)."""

    def __init__(self, body: Iterable[bytes], span: TraceScope, response: dict[str, Any]) -> None:
        self._body, self._span, self._response = body, span, response
        self._open = True

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._body
        except GeneratorExit:  # left unread, and collected: close() (or, let go of unclosed, __del__) ends the span
            raise
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        except BaseException as exc:
            self._end(exc)
            raise
        self._end(None)

    def __del__(self) -> None:
        """Never closed (a server that let go of it unread): the span ends as it goes, so that it is recorded, and so
        that the thread's next requests are not served inside it."""
        with contextlib.suppress(Exception):  # (at the interpreter's exit, say): nothing raises into a finalizer
            self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        if exc is None:
            self._span.__exit__(None, None, None)
        else:
            self._response["error"] = error_text(exc)
            self._span.__exit__(type(exc), exc, exc.__traceback__)


def install(timeline: Timeline) -> None:
    """Wrap the apps of wsgiref's, werkzeug's, gunicorn's and waitress's servers in ``WSGIMiddleware``: those
    imported now, and each of the others once it is."""
    patch_servers(
        timeline,
        "wsgi",
        [
            ("wsgiref.handlers", patch_wsgiref),
            ("werkzeug.serving", patch_werkzeug),
            ("gunicorn.workers.base", patch_gunicorn),
            ("waitress.server", patch_waitress),
        ],
    )


def patch_wsgiref(timeline: Timeline) -> None:
    """Wrap the app of every request ``wsgiref.handlers.BaseHandler.run`` runs."""

    def make_run(run: Callable[[Any, _App], None]) -> Callable[[Any, _App], None]:
        def wrapped_run(self: Any, application: _App) -> None:
            if not isinstance(application, WSGIMiddleware):
                application = WSGIMiddleware(application, timeline)
            run(self, application)

        return wrapped_run

    patch(sys.modules["wsgiref.handlers"].BaseHandler, "run", make_run)


def patch_werkzeug(timeline: Timeline) -> None:
    """Wrap the app every werkzeug development server is made with."""

    def make_init(init: Callable[..., None]) -> Callable[..., None]:
        def wrapped_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            try:
                if not isinstance(self.app, WSGIMiddleware):
                    self.app = WSGIMiddleware(self.app, timeline)
            except Exception:  # werkzeug changed: it serves unrecorded
                pass

        return wrapped_init

    patch(sys.modules["werkzeug.serving"].BaseWSGIServer, "__init__", make_init)


def patch_gunicorn(timeline: Timeline) -> None:
    """Wrap the app each of gunicorn's WSGI workers (sync, gthread, gevent, eventlet) loads."""

    def make_load(load: Callable[[Any], None]) -> Callable[[Any], None]:
        def wrapped_load(self: Any) -> None:
            load(self)
            try:
                if type(self).__module__ in _GUNICORN_WSGI_WORKERS and not isinstance(self.wsgi, WSGIMiddleware):
                    self.wsgi = WSGIMiddleware(self.wsgi, timeline)
            except Exception:  # gunicorn changed: it serves unrecorded
                pass

        return wrapped_load

    patch(sys.modules["gunicorn.workers.base"].Worker, "load_wsgi", make_load)


def patch_waitress(timeline: Timeline) -> None:
    """Wrap the app every waitress server is made with (``waitress.serve``, ``create_server``, ``waitress-serve``)."""

    def make_init(init: Callable[..., None]) -> Callable[..., None]:
        def wrapped_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            try:
                if not isinstance(self.application, WSGIMiddleware):
                    self.application = WSGIMiddleware(self.application, timeline)
            except Exception:  # waitress changed: it serves unrecorded
                pass

        return wrapped_init

    patch(sys.modules["waitress.server"].BaseWSGIServer, "__init__", make_init)
