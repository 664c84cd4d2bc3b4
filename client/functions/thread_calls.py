"""A thread's part of the pure-Python function tracer (``python_tracer.py``): its open calls, the records it wrote
and the asyncio task (and greenlet) switches it noted since the last drain, and what tells when the thread has ended.

Greenlets share their thread: each has open calls of its own, which ``swap`` puts in place of the thread's as the
program switches to it (``greenlet_switches.py`` tells when), and whose records are the greenlet's (a switch noted, as
a task's)."""

from __future__ import annotations

import time
import weakref
from typing import Any

from ringtrace.wire.call_records import RECORD

__all__ = ["GreenletCalls", "ThreadCalls", "ThreadEnd", "mark_ended", "split"]


class ThreadCalls:
    """One thread's open calls and the records it wrote since the last drain."""

    __slots__ = (
        "__weakref__",
        "base",
        "buffer",
        "drained",
        "dropped",
        "ended",
        "ident",
        "in_task",
        "lane_task",
        "recorded",
        "stack",
        "step_task",
        "tasks",
        "thrown",
        "woken",
    )

    def __init__(self, ident: int) -> None:
        self.ident = ident
        #: Open calls, outermost first: (key: id of the code or of the C callable, location index or -1, start ns).
        self.stack: list[tuple[int, int, int]] = []
        #: 3.11: the open generator resumes an exception was thrown into (``throw``, ``close``), by their entry's start:
        #: the offset of the yield it was thrown in at.
        self.thrown: dict[int, int] = {}
        #: The asyncio task switches not drained yet: (``recorded`` then, the task whose step began then, or None:
        #: the step ended). A call ends inside the step it began in, so a record is the step's iff written in it.
        self.tasks: list[tuple[int, Any]] = []
        #: Whether a task's step is open on ``stack`` (its entry's key is the negated id of its coroutine's code), and
        #: its task.
        self.in_task = False
        self.step_task: Any = None
        #: Whose the records are outside a task's step: the greenlet running (None: the thread's main one, or none).
        self.base: Any = None
        #: The task (or None) of the records drained last, the first of the next drain's if no switch comes between.
        self.lane_task: Any = None
        self.buffer = bytearray()
        self.woken = False
        self.ended = False
        self.recorded = 0
        self.dropped = 0
        #: Records drained so far (``recorded`` counts those written).
        self.drained = 0

    def take_records(self) -> bytes:
        """The records written since the last drain, taken from ``buffer`` (only what was taken: the thread may
        append meanwhile)."""
        buffer = self.buffer
        records = bytes(buffer)
        if records:
            del buffer[: len(records)]
        self.woken = False
        return records

    def take_cuts(self, size: int) -> list[tuple[int, Any]]:
        """Where in the ``size`` bytes of records just taken each task's begin: (byte offset, task or None), the first
        at 0; the switches they used are taken (those after them are left: the thread may have noted some since)."""
        first = self.drained
        self.drained = last = first + size // RECORD.size
        cuts = [(0, self.lane_task)]
        tasks = self.tasks
        used = 0
        for seq, task in tasks[: len(tasks)]:
            if seq >= last:
                break
            cuts.append(((seq - first) * RECORD.size, task))
            used += 1
        if used:
            del tasks[:used]
            self.lane_task = cuts[-1][1]
        return cuts

    def begin_step(self, task: Any) -> None:
        """A step of ``task`` begins: the records from now on are its."""
        self.note(task)
        self.in_task, self.step_task = True, task

    def end_step(self) -> None:
        """The task's step ends: the records from now on are the greenlet's (or the thread's)."""
        self.in_task, self.step_task = False, None
        self.note(self.base)

    def swap(self, saved: Any, lane: Any) -> Any:
        """The program switched to another greenlet: its open calls (``saved``, from an earlier ``swap``; None: none
        yet) take the place of the thread's, which are returned, and the records from now on are ``lane``'s (the
        greenlet; None: the thread's main one), or those of the task whose step it had open."""
        out = (self, self.stack, self.thrown, self.in_task, self.step_task)
        if saved is not None and saved[0] is self:
            _, self.stack, self.thrown, self.in_task, self.step_task = saved
        else:
            self.stack, self.thrown, self.in_task, self.step_task = [], {}, False, None
        self.base = lane
        self.note(self.step_task if self.in_task else lane)
        return out

    def note(self, owner: Any) -> None:
        """The records from now on are ``owner``'s (a task, a greenlet's lane, or None). A note of no record since the
        one before takes its place: notes are taken with the records after them, and a thread that switches greenlets
        (or steps tasks) but records nothing for a while would otherwise keep one a switch."""
        tasks, recorded = self.tasks, self.recorded
        if tasks and tasks[-1][0] == recorded:  # (never taken meanwhile: a drain takes those before its last record)
            tasks[-1] = (recorded, owner)
        else:
            tasks.append((recorded, owner))


class GreenletCalls:
    """The pure-Python tracer's part for greenlets (the C twin's is ``tracer/greenlets.c``): each greenlet's open calls
    swapped in as the program switches to it (``greenlet_switches.py`` tells when)."""

    _active: bool

    def _thread_calls(self) -> ThreadCalls:
        raise NotImplementedError

    def _end_all(self, calls: ThreadCalls, stack: list[tuple[int, int, int]], now: int) -> None:
        raise NotImplementedError

    def switch_calls(self, saved: Any, lane: Any) -> Any:
        """The program switched greenlets on this thread: ``saved`` (what this returned as it left the greenlet now
        switched to; None: nothing yet) becomes the thread's open calls, whose records are ``lane``'s (the greenlet;
        None: the thread's main one); returns the open calls of the greenlet left (None while stopped)."""
        return self._thread_calls().swap(saved, lane) if self._active else None

    def close_calls(self, saved: Any, lane: Any) -> None:
        """The open calls of a greenlet left suspended (``saved``, ``lane``'s) end now, as stop() ends the threads'."""
        calls, stack, _, in_task, step_task = saved
        if stack:
            calls.note(step_task if in_task else lane)
            self._end_all(calls, stack, time.monotonic_ns())
            calls.note(calls.step_task if calls.in_task else calls.base)


class ThreadEnd:
    """Kept in a thread's local storage: it goes when the thread ends, and its finaliser marks the thread's calls."""

    __slots__ = ("__weakref__",)


def mark_ended(calls_ref: weakref.ref[ThreadCalls]) -> None:
    calls = calls_ref()
    if calls is not None:
        calls.ended = True


def split(records: bytes, cuts: list[tuple[int, Any]]) -> list[tuple[Any, bytes]]:
    """``records`` as (task or None, its records in the order written) by ``cuts`` (``ThreadCalls.take_cuts``): the
    records of no task first, then each task's in the order it first made one."""
    parts: dict[Any, list[bytes]] = {None: []}
    ends = [offset for offset, _ in cuts[1:]] + [len(records)]
    for (offset, task), end in zip(cuts, ends, strict=True):
        if end > offset:
            parts.setdefault(task, []).append(records[offset:end])
    return [(task, b"".join(chunks)) for task, chunks in parts.items() if chunks]
