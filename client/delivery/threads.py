"""The client's background threads: daemons that leave the host program's signals to the program's own threads.

A signal sent to a process goes to any one of its threads that does not block it, and a Python handler runs only in
the main thread, once that thread runs again. Our threads block the signals a program handles, so the kernel hands
them to a thread of the program: one that waits in a blocking call is interrupted, and the handler runs at once.
(That alone does not make a handler certain to run: see ``SigtermDelivery`` in ``exit_delivery.py``.)

Each is a ``BackgroundThread``, by which the sampler knows the threads that are ringtrace's and not the program's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["BackgroundThread", "background_thread"]

#: The signals a program may handle (not those that report a fault of the thread that caused it).
_PROGRAM_SIGNALS: Final = frozenset(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGWINCH")
    if hasattr(signal, name)
)


class BackgroundThread(threading.Thread):
    """A thread of ringtrace's own (the flusher, the streamer, the sampler, ...): never the program's."""


def background_thread(target: Callable[[], object], name: str) -> BackgroundThread:
    """A daemon thread (not started) that runs ``target`` with the program's signals blocked."""

    def run() -> None:
        if hasattr(signal, "pthread_sigmask"):  # (not on Windows, where signals go to the main thread anyway)
            signal.pthread_sigmask(signal.SIG_BLOCK, _PROGRAM_SIGNALS)
        target()

    return BackgroundThread(target=run, name=name, daemon=True)
