"""Listeners retired while the program runs: a streamer replaced (``connect()`` under another name, or to another
collector) closes on a thread of its own, not on the caller's.

Closing a streamer waits for the collector to acknowledge what it holds: 25-40 ms with the collector there, its whole
``exit_timeout_s`` (2 s) with none, and a pool worker that names itself after each task would wait that long per
task. Here the old streamer goes on delivering on a background thread, within its own ``exit_timeout_s``; what it
cannot deliver by then it counts and says in its line at close, as a close on the caller's thread would. Nothing is
lost in silence: events reach it before it is replaced (``Timeline.replace_listener``), and its counts are its own.

Bounded: at most ``MAX_RETIRING`` close at once; one more waits for the oldest to finish first (a program renaming
faster than its old streamers close is held back, rather than piling up threads and queues). At exit (the
interpreter's, a multiprocessing child's, a SIGTERM's delivery: ``Flusher.close_at_exit`` calls its ``before_exit``)
those still closing are told the exit has begun (a collector found not there is not waited for) and waited for,
each within its own deadline. A forked child has none: the parent's delivers what the parent handed over.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Final, Protocol

from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.delivery.threads import background_thread

__all__ = ["MAX_RETIRING", "RETIRING", "Retiring"]

#: Listeners closing in the background at once, at most.
MAX_RETIRING: Final = 4
#: What a close may take past its timeout (its thread's last join, its line at close).
_SLACK_S: Final = 0.5


class _Closable(Protocol):
    def close(self, timeout_s: float) -> bool: ...


class _Closing:
    __slots__ = ("deadline", "listener", "thread")

    def __init__(self, listener: _Closable, thread: threading.Thread, deadline: float) -> None:
        self.listener = listener
        self.thread = thread
        self.deadline = deadline


class Retiring:
    """The listeners closing on threads of their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closing: list[_Closing] = []
        self._hooked = False

    def retire(self, listener: _Closable, timeout_s: float) -> None:
        """Close ``listener`` within ``timeout_s`` on a background thread (on this one where none can start: at
        interpreter shutdown)."""
        with self._lock:
            self._closing = [c for c in self._closing if c.thread.is_alive()]
            oldest = self._closing[0] if len(self._closing) >= MAX_RETIRING else None
            if not self._hooked:
                self._hooked = True
                FLUSHER.before_exit.append(self.at_exit)
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=self._after_fork_in_child)
        if oldest is not None:
            oldest.thread.join(max(oldest.deadline - time.monotonic(), 0.0))
        thread = background_thread(lambda: listener.close(timeout_s), "ringtrace-retiring")
        closing = _Closing(listener, thread, time.monotonic() + max(timeout_s, 0.0) + _SLACK_S)
        with self._lock:
            self._closing.append(closing)
        try:
            thread.start()
        except RuntimeError:  # (no thread starts at interpreter shutdown)
            with self._lock:
                self._closing.remove(closing)
            listener.close(timeout_s)

    def closing(self) -> list[_Closable]:
        """The listeners still closing."""
        with self._lock:
            return [c.listener for c in self._closing if c.thread.is_alive()]

    def at_exit(self) -> None:
        """The exit delivery begins: those still closing give up on a collector not there, and are waited for."""
        with self._lock:
            closing = [c for c in self._closing if c.thread.is_alive()]
        for c in closing:
            exit_begins = getattr(c.listener, "exit_begins", None)
            if exit_begins is not None:
                exit_begins()
        for c in closing:
            c.thread.join(max(c.deadline - time.monotonic(), 0.0))

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._closing = []


RETIRING = Retiring()
