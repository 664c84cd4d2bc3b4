"""What recording with no code change does at ``os.fork()``: the child records where it was forked and starts its
streamer at once, and the parent's fork does not warn of threads that are ringtrace's alone.

``connect()`` already gives a forked child a connection of its own, whose thread starts on first use. A child that
exits at once would first use it from its exit handlers, where Python 3.12 and later refuse to start a thread: so it
starts in the child right after the fork. And Python 3.12 and later warn at ``fork()`` in a process with more than one
thread (a DeprecationWarning, shown for a fork in ``__main__``): under ``ringtrace run`` the threads may be ringtrace's
alone, and the program, which has none, would print a warning it does not print under ``python``. Where every thread
but the forking one is ringtrace's, that warning is ignored for that fork (each fork decides again). In a program whose
threads gevent made greenlets, none is started in the child's fork handler (gevent's, after it, expects the forking
thread alone), nor the mark recorded (its first event would start one): they start at its first event.

A child multiprocessing forks (start method ``fork``) is named after its parent and itself (``app.py
(ForkPoolWorker-1)``) by ``connect``'s fork handler, which runs before this one: its first HELLO carries that name
however early it starts.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

from ringtrace.client.delivery import unpatched
from ringtrace.client.delivery.streaming.streamer import Streamer
from ringtrace.client.recording.timelines import Timeline

__all__ = ["watch_forks"]

#: The warning of CPython 3.12+ (``This process (pid=42) is multi-threaded, use of fork() may lead to deadlocks ...``).
_FORK_WARNING = r"This process \(pid=\d+\) is multi-threaded, use of "
#: The names of ringtrace's threads (``delivery/threads.py``): ``ringtrace-flusher``, ``ringtrace-streamer``, ...
_OURS = "ringtrace-"
_watched = False
_quieted: list[Any] = []


def watch_forks(timeline: Timeline, mark: str) -> None:
    """From now on, a forked child records the instant ``mark`` (``how="fork"``) on ``timeline`` and starts its
    streamer; once a process (later calls change nothing)."""
    global _watched
    if _watched or not hasattr(os, "register_at_fork"):
        return
    _watched = True  # (after connect's own hook, which gives the child its streamer: after-hooks run in order)
    os.register_at_fork(before=_quiet_if_only_ours, after_in_child=lambda: _in_child(timeline, mark))


def _in_child(timeline: Timeline, mark: str) -> None:
    _unquiet()
    _start_child(timeline, mark)


def _start_child(timeline: Timeline, mark: str) -> None:
    try:
        if unpatched.threads_are_greenlets():
            # A thread is a greenlet: one started here, by the mark's first event or the streamer, is in threading's
            # records before gevent's own fork hook runs, which expects the forking thread alone there (an assertion
            # failed in the child, its other greenlets left running). They start at the child's first event.
            return
        timeline.instant(mark, how="fork")
        for listener in timeline.listeners:
            if isinstance(listener, Streamer):
                listener.start()
    except Exception:  # never into the program's fork: the child records as connect() left it
        pass


def _quiet_if_only_ours() -> None:
    # The filter stays until the next fork decides again: 3.12 warns before the after-fork hooks run in the parent,
    # 3.13 after them. It matches that warning alone, which nothing but a fork gives.
    _unquiet()
    current = threading.current_thread()
    if all(thread is current or thread.name.startswith(_OURS) for thread in threading.enumerate()):
        warnings.filterwarnings("ignore", message=_FORK_WARNING, category=DeprecationWarning)
        _quieted.append(warnings.filters[0])


def _unquiet() -> None:
    # (Not re-counted by the warnings module: nothing was shown, so nothing was remembered, while it was in place.)
    while _quieted:
        entry = _quieted.pop()
        filters: list[Any] = warnings.filters  # type: ignore[assignment]  # (a list, typed as a Sequence)
        if entry in filters:
            filters.remove(entry)
