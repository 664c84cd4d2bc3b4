"""The ``exceptions`` integration: an uncaught exception becomes an instant, then the program's own hook runs.

Three places see an exception nobody caught: ``sys.excepthook`` (the main thread's), ``threading.excepthook`` (any
other thread's), and an asyncio loop's ``call_exception_handler`` (a task's exception never retrieved, a callback's
exception). Each gets a wrapper that records the instant ``uncaught exception`` (``type``, ``message``, ``thread``, and
``task`` for asyncio) on the thread or task where it is handled, then calls what was there before with the same
arguments: the output, the exit status and any later hook are as without ringtrace. The asyncio wrapper is on
``asyncio.BaseEventLoop`` (every loop of the standard library), put there once the program imports asyncio (ringtrace
does not import it), rather than on a loop's handler, so
``loop.get_exception_handler()`` still answers what the program set, and a handler the program sets later is called
as before. ``SystemExit`` in a thread is not recorded: Python ignores it too.

A program may replace ``sys.excepthook`` after ringtrace wrapped it, and its hook need not call the one before. The
exception is still found at exit: Python leaves the main thread's uncaught exception in ``sys.last_exc`` (3.12+) and
``sys.last_value`` before it calls the hook (``ringtrace run`` does the same, ``launch/program.py``), so the exit
delivery first records the instant for the one found there, unless the wrapper already did (then it is the same
object). A replaced ``threading.excepthook`` has no such trace: a thread's exception is then not recorded.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.integrations.hook_errors import count_failure
from ringtrace.client.recording.asyncio_watch import when_asyncio

if TYPE_CHECKING:
    from ringtrace.client.recording.timelines import Timeline

__all__ = ["INSTANT", "exception_text", "install", "type_name"]

_NAME = "exceptions"
#: The name of the instant an uncaught exception becomes.
INSTANT = "uncaught exception"

_timeline: Timeline | None = None
#: The exception the ``sys.excepthook`` wrapper last recorded (so that the exit does not record it again).
_recorded_by_hook: object = None


def install(timeline: Timeline) -> None:
    """Record uncaught exceptions into ``timeline`` (idempotent: a second call changes nothing)."""
    global _timeline
    if _timeline is not None:
        return
    _timeline = timeline
    sys.excepthook = _wrap_sys_hook(sys.excepthook)
    threading.excepthook = _wrap_thread_hook(threading.excepthook)
    when_asyncio(_wrap_loops)  # now, or once the program imports it (ringtrace does not)
    FLUSHER.before_exit.append(_record_left_at_exit)  # (before the exit delivery's last sweep, whatever the order)


def _record(exc_type: Any, exc: Any, **where: str) -> None:
    """Record the instant; never raises."""
    try:
        assert _timeline is not None
        where.setdefault("thread", threading.current_thread().name)
        _timeline.instant(INSTANT, type=type_name(exc_type), message=exception_text(exc), **where)
    except Exception as failure:
        count_failure(_NAME, failure)


def _wrap_sys_hook(previous: Callable[..., Any]) -> Callable[..., Any]:
    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> Any:
        global _recorded_by_hook
        _recorded_by_hook = exc
        _record(exc_type, exc)
        return previous(exc_type, exc, tb)

    return excepthook


def _record_left_at_exit() -> None:
    """At exit: the main thread's uncaught exception that Python left in ``sys`` and no wrapper recorded (the program
    replaced ``sys.excepthook``)."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if isinstance(exc, BaseException) and exc is not _recorded_by_hook:
        _record(type(exc), exc, thread=threading.main_thread().name)


def _wrap_thread_hook(previous: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def excepthook(args: Any) -> Any:
        try:
            recorded = args.exc_type is not SystemExit
            thread = args.thread.name if args.thread is not None else threading.current_thread().name
        except Exception as failure:
            count_failure(_NAME, failure)
            recorded = False
        if recorded:
            _record(args.exc_type, args.exc_value, thread=thread)
        return previous(args)

    return excepthook


def _wrap_loops(_: object = None) -> None:
    import asyncio

    previous = asyncio.BaseEventLoop.call_exception_handler

    def call_exception_handler(self: asyncio.BaseEventLoop, context: dict[str, Any]) -> None:
        try:
            exc = context.get("exception")
            if isinstance(exc, BaseException):
                task = context.get("task") or context.get("future")
                where = {"task": task.get_name()} if isinstance(task, asyncio.Task) else {}
                _record(type(exc), exc, **where)
        except Exception as failure:
            count_failure(_NAME, failure)
        previous(self, context)

    asyncio.BaseEventLoop.call_exception_handler = call_exception_handler  # type: ignore[method-assign]


def type_name(cls: Any) -> str:
    """An exception class's name as a reader knows it: ``KeyError``, ``json.decoder.JSONDecodeError``."""
    module, name = getattr(cls, "__module__", None), getattr(cls, "__qualname__", repr(cls))
    return str(name) if module in (None, "builtins") else f"{module}.{name}"


def exception_text(exc: Any) -> str:
    """``str(exc)``, or what stands for it when that fails."""
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ fails: its type says enough
        return f"<{type(exc).__name__} whose str() failed>"
