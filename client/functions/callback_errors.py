"""What a function tracer's callback does with an exception it caught: the tracer's own is logged and dropped (tracing
never raises into the program); one the program's signal handler raised while the callback ran goes on to the program.
"""

from __future__ import annotations

import functools
import logging
import threading
import types

__all__ = ["failed", "profile_function_removed", "raised_by_a_signal_handler", "signal_handler_codes"]

log = logging.getLogger("ringtrace.client")


def failed(exc: Exception, what: str) -> None:
    """In a callback's handler of ``exc``: raise it again if a signal handler raised it, else log it (debug)."""
    if raised_by_a_signal_handler(exc):
        raise exc  # (the program's, as it would be untraced)
    log.debug("ringtrace: function tracer failed on %s", what, exc_info=exc)


def raised_by_a_signal_handler(exc: BaseException) -> bool:
    """Whether ``exc``, caught in a callback of the tracer's, was raised by one of the program's signal handlers (Python
    runs one between any two bytecodes, the tracer's too): it must reach the program as it would untraced (a timeout's
    ``TimeoutError`` swallowed here, the program would wait on). Told by a handler's frame in its traceback; any other
    exception is the tracer's (or ``decide``'s) own, logged and dropped."""
    handlers = signal_handler_codes()
    traceback = exc.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code in handlers:
            return True
        traceback = traceback.tb_next
    return False


def signal_handler_codes() -> set[types.CodeType]:
    """The code of every Python signal handler installed now (a function, a method, a partial, a callable object)."""
    import signal  # (here: asked only when a callback caught an exception)

    codes = set()
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        while isinstance(handler, functools.partial):
            handler = handler.func
        function = getattr(handler, "__func__", handler)
        code = getattr(function, "__code__", None)
        if code is None:  # (a callable object)
            code = getattr(vars(type(handler)).get("__call__"), "__code__", None)
        if isinstance(code, types.CodeType):
            codes.add(code)
    return codes


def profile_function_removed(exc: BaseException) -> None:
    """3.11: an exception that leaves the profile function makes the interpreter remove it from its thread, whose
    calls are then no longer traced (nor counted): said, as it cannot be undone from here."""
    log.warning(
        "ringtrace: function tracing stops on thread %r: %s, raised inside the tracer's profile function (by a "
        "signal handler, or at the recursion limit), goes to the program, and Python 3.11 removes a profile function "
        "that raises",
        threading.current_thread().name,
        type(exc).__name__,
    )
