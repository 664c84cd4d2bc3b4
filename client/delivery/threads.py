"""The client's background threads: daemons that leave the host program's signals to the program's own threads.

A signal sent to a process goes to any one of its threads that does not block it, and a Python handler runs only in
the main thread, once that thread runs again. Our threads block the signals a program handles, so the kernel hands
them to a thread of the program: one that waits in a blocking call is interrupted, and the handler runs at once.
(That alone does not make a handler certain to run: see ``SigtermDelivery`` in ``exit_delivery.py``.)

``is_background_thread`` tells them apart from the program's (the sampler samples the program's alone).

A thread ends by removing itself from ``threading``'s threads under its ident, which ``threading`` asks of its
``get_ident`` then: gevent's once the program called ``monkey.patch_all()``, whose greenlet id is no thread's (a
KeyError), and whose call gave the ending OS thread greenlet state. Ours remove themselves under the ident they
started with (see ``unpatched.py`` for the rest of what they use).

Only a thread that runs in an OS thread of its own blocks them: one started once gevent patched ``threading`` is a
greenlet in the OS thread that started it (the program's main thread, most often), where blocking them blocked them
for the program: SIGCHLD never reached gevent's child watcher (every ``subprocess`` wait hung), SIGTERM and SIGINT no
longer ended it.
"""

from __future__ import annotations

import _thread
import signal
import threading
import weakref
from collections.abc import Callable
from typing import Final

from ringtrace.client.delivery import unpatched

__all__ = ["background_thread", "is_background_thread"]

#: The signals a program may handle (not those that report a fault of the thread that caused it).
_PROGRAM_SIGNALS: Final = frozenset(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGWINCH")
    if hasattr(signal, name)
)


#: The OS thread's id, which gevent does not patch (a greenlet's is its OS thread's).
_get_native_id: Final = _thread.get_native_id

#: The threads ``background_thread`` made (held weakly: an ended one goes).
_OURS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def is_background_thread(thread: threading.Thread) -> bool:
    """Whether ``thread`` is one of ringtrace's own (the flusher, the streamer, the sampler, ...), not the program's."""
    return thread in _OURS


def background_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread (not started) that runs ``target`` with the program's signals blocked (if an OS thread)."""
    started_in: list[int] = []  # (the OS thread that started it)

    def run() -> None:
        own_os_thread = _get_native_id() not in started_in  # (else a greenlet, in the OS thread that started it)
        unpatched.thread_begins(own_os_thread)
        try:
            # (not on Windows, where signals go to the main thread anyway; nor in a greenlet: see above)
            if own_os_thread and hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_BLOCK, _PROGRAM_SIGNALS)
            target()
        finally:
            unpatched.thread_ends()

    thread = threading.Thread(target=run, name=name, daemon=True)
    start = thread.start

    def start_here() -> None:
        started_in.append(_get_native_id())
        start()

    thread.start = start_here  # type: ignore[method-assign]

    def delete() -> None:  # (in place of ``threading``'s, which asks ``get_ident``)
        with threading._active_limbo_lock:  # type: ignore[attr-defined]
            threading._active.pop(thread.ident, None)  # type: ignore[attr-defined]

    thread._delete = delete  # type: ignore[attr-defined]
    _OURS.add(thread)
    return thread
