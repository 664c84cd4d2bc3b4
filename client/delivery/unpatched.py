"""The threading, time and socket primitives as the interpreter made them, for ringtrace's own threads.

gevent's ``monkey.patch_all()`` replaces ``_thread``'s, ``threading``'s, ``time.sleep``, ``socket``'s and ``select``'s
functions with ones bound to a gevent hub of the calling thread. A program may call it after ringtrace's threads
started (under ``ringtrace run`` or ``RINGTRACE_AUTO=1`` ringtrace connects at interpreter start): from then on an
``Event.wait`` (which makes its waiter lock with ``threading``'s patched ``_allocate_lock``), a ``time.sleep``, or a
socket made by a background thread would start a hub and switch greenlets in that OS thread, and the thread's
greenlet state, cleaned up as the thread ends at exit, crashed the interpreter (a segfault in greenlet's switch).
So the background threads wait, sleep and connect with what this module captured when it was imported.

What they log goes to stderr, not through the program's handlers, once gevent patched ``threading``: a handler's lock
is gevent's then (made by the patched ``threading``), and taking it from an OS thread of ours started a hub there; the
program died of gevent's ``LoopExit`` or hung, its own greenlet waiting on a lock that hub held (the collector down or
restarted, whose warnings the streamer's thread logs).

Only ours, and only those that are OS threads: a program that patched before ringtrace's threads started has them
run as greenlets (``threading.Thread`` is a greenlet then), in the thread of its hub, where a wait on an OS lock would
stall every greenlet; so would the program's own threads waiting (a flush) once patched. Each background thread calls
``thread_begins`` first, told whether it runs in an OS thread of its own (one started before gevent patched
``_thread``), which these primitives serve with the interpreter's; every other caller gets the module's current ones
(gevent's, once patched; an ``Event`` then polled between gevent's sleeps). A program patched before ringtrace was
imported gives gevent's here anyway, its threads being greenlets throughout.
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from typing import Any, Final

#: How often a greenlet waiting on an ``Event`` looks at it.
_POLL_S: Final = 0.005

__all__ = [
    "Event",
    "allocate_lock",
    "create_socket",
    "get_ident",
    "getaddrinfo",
    "interpreters",
    "main_ident",
    "sleep",
    "socketpair",
    "thread_begins",
    "thread_ends",
    "threads_are_greenlets",
]


allocate_lock: Final = _thread.allocate_lock
get_ident: Final = _thread.get_ident
_sleep: Final = time.sleep
_getaddrinfo: Final = socket.getaddrinfo
_socketpair: Final = socket.socketpair
_socket_class: Final = socket.socket

#: The idents of ringtrace's threads that run as OS threads of their own (see above).
_os_threads: set[int] = set()


def thread_begins(own_os_thread: bool) -> None:
    """Called first by each background thread: whether it runs in an OS thread of its own, or is a greenlet in the
    OS thread that started it (``threads.py`` tells them apart)."""
    if own_os_thread:
        _os_threads.add(get_ident())


def threads_are_greenlets() -> bool:
    """Whether a ``threading.Thread`` started now would be a greenlet in the starting OS thread (gevent patched
    ``threading``, before ringtrace was imported or since)."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


def thread_ends() -> None:
    """Called last by each background thread (its ident may be another thread's next)."""
    _os_threads.discard(get_ident())


def _to_stderr_off_gevent(record: logging.LogRecord) -> bool:
    """A filter of ringtrace's logger: a record logged in an OS thread of ours once gevent patched ``threading`` is
    written to stderr here and goes no further (False); any other goes on to the handlers (True). See above."""
    if get_ident() not in _os_threads or not threads_are_greenlets():
        return True
    if record.levelno >= logging.WARNING:  # (as logging's last resort writes them: below, a handler's choice)
        with contextlib.suppress(Exception):  # (stderr closed or gone, at exit: lost, never raised into this thread)
            sys.stderr.write(_FORMAT.format(record) + "\n")
    return False


#: What a record written to stderr looks like (``logging``'s last resort: the message, and a traceback if any).
_FORMAT: Final = logging.Formatter("%(message)s")
logging.getLogger("ringtrace.client").addFilter(_to_stderr_off_gevent)


def interpreters(name: str) -> Any:
    """``_thread``'s ``name`` as the interpreter made it (``get_ident``, ``_local``), whether gevent patched it before
    this module was imported or not (then: what gevent kept of it)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None:
        with contextlib.suppress(Exception):
            return monkey.get_original("_thread", name)
    return getattr(_thread, name)


def _interpreter_get_ident() -> int:
    """The calling thread's ident, its OS thread's (see ``interpreters``)."""
    return int(interpreters("get_ident")())


def _remember_main_thread() -> None:
    main = threading.main_thread()
    _main_ident[0] = _interpreter_get_ident() if threading.current_thread() is main else main.ident


#: The main thread's ident, its OS thread's (see ``main_ident``); a forked child's is the thread that forked.
_main_ident: list[int | None] = [None]
_remember_main_thread()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_remember_main_thread)


def main_ident() -> int | None:
    """The main thread's ident as its OS thread's: gevent's ``monkey.patch_all()`` keys the main thread by its main
    greenlet's id in ``threading`` (its ``ident`` and ``threading``'s table), while the C function tracer and the
    sampler meet it by the OS thread's. (Where this module was imported on another thread after gevent patched:
    ``threading``'s, the greenlet's.)"""
    return _main_ident[0]


def _greenlet_here() -> bool:
    """gevent patched since this module was imported, and the caller is not an OS thread of ours."""
    return time.sleep is not _sleep and get_ident() not in _os_threads


def sleep(seconds: float) -> None:
    if _greenlet_here():
        time.sleep(seconds)
    else:
        _sleep(seconds)


def getaddrinfo(host: str | None, port: int, family: int = 0, kind: int = 0) -> list[Any]:
    return (socket.getaddrinfo if _greenlet_here() else _getaddrinfo)(host, port, family, kind)


def socketpair() -> tuple[socket.socket, socket.socket]:
    return (socket.socketpair if _greenlet_here() else _socketpair)()


def create_socket(family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket of the standard library's class (a blocking one, whatever the program patched since)."""
    return (socket.socket if _greenlet_here() else _socket_class)(family, kind, proto)


class Event:
    """``threading.Event``'s flag on the unpatched lock: set, clear, is_set and wait (with a timeout or not), from
    any thread, a background one or the program's (whose wait blocks its OS thread: a short wait at flush or exit)."""

    __slots__ = ("_flag", "_lock", "_waiters")

    def __init__(self) -> None:
        self._lock = allocate_lock()
        self._waiters: list[Any] = []
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._lock:
            self._flag = True
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.release()

    def clear(self) -> None:
        with self._lock:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the flag is set, once it is or ``timeout`` s went by (None: no end)."""
        with self._lock:
            if self._flag:
                return True
            waiter = allocate_lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if _greenlet_here():  # (polled: the hub runs the other greenlets meanwhile)
            got = _poll(waiter, timeout)
        elif timeout is None:
            got = waiter.acquire()
        else:
            got = waiter.acquire(True, max(timeout, 0.0))
        if got:
            return True
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            return self._flag


def _poll(waiter: Any, timeout: float | None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not waiter.acquire(False):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True
