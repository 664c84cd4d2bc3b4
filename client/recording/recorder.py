"""The recording hot path: ``scope``, ``instant`` and ``push``, and the caches that find the running thread's or task's
buffer for them.

Every recording thread gets a buffer (``tracks.TrackBuffer``) on its first event, and that buffer's flat list is
cached in a ``threading.local``, with its bound (a ``Recording``). Recording is then one ``len`` and one
``list.extend`` of a 5-tuple: no lock, no id lookup, no packing (``drain.py`` says why the list is flat and why a
drain racing with it is safe). A buffer holds only numbers, labels and argument maps, and ``None`` rather than an
empty dict when there are no arguments, which keeps the cyclic garbage collector out of the way.

The ``len`` is the bound: a buffer holding ``max_buffered_events`` refuses the next event, counted (``_count_full``),
until the flusher takes what it holds. Checked as each event is recorded, it bounds the memory of a thread that
outruns the flusher, however long a pass of the flusher takes. The same ``len`` wakes the flusher when a buffer is
half full, so that a thread recording at full speed is drained before it fills rather than at the next interval.

A recorder with no listener, or a closed one, records into ``NOWHERE``, a ``deque(maxlen=0)``: its length is 0 and
its extend keeps nothing. When the listeners change, ``_reset_recorders`` swaps in a fresh ``threading.local``: every
thread then takes the slow path once and picks up the new state.

The C accelerator (``accelerator.py``) replaces ``_PyRecorder``, the base class holding ``scope``, ``instant`` and
``push``, with one that does the same in C, caches the buffer of the last thread that recorded, and asks
``_thread_events`` and ``_task_events`` (by name, on the timeline) for the rest. ``Recorder`` is the state both
recorders share: the timeline is one, so nothing on the hot path goes through another object.

Which asyncio loop runs in the thread is asked of asyncio only from when the program imports it (``asyncio_watch.py``):
until then no loop can run, and ringtrace does not import asyncio for a program that never does.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ringtrace.client.accelerator import speedups
from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording.asyncio_watch import NO_LOOP, current_task, when_asyncio
from ringtrace.client.recording.events import Event
from ringtrace.client.recording.lanes import FIRST_FIT
from ringtrace.client.recording.tracks import NOWHERE, TASK_SWITCH, Recording, Sink, Tracks
from ringtrace.wire.model import INSTANT, SPAN

if TYPE_CHECKING:
    from asyncio import Task
    from types import ModuleType, TracebackType

    from ringtrace.client.recording.tracks import TrackBuffer

__all__ = ["Recorder", "Scope"]

log = logging.getLogger("ringtrace.client")
_now = time.monotonic_ns
_new = object.__new__
_wake_flusher = FLUSHER.wake
#: This thread's running asyncio loop: none until the program imports asyncio, then asyncio's answer (``_use_asyncio``).
_get_running_loop: Callable[[], object] = NO_LOOP


class Scope:
    """Context manager that records one complete span when it exits.

    ``Timeline.scope`` makes one without calling ``__init__`` (see ``_new_scope``): a call into a Python-level
    ``__init__`` is a good part of the cost of a span. The two set the same state.
    """

    __slots__ = ("_start_ns", "_what")

    def __init__(self, recording: Recording, label: object, args: dict[str, Any] | None) -> None:
        self._what = (recording, label, args)

    def __enter__(self) -> Scope:
        self._start_ns = _now()
        return self

    @property
    def label(self) -> object:
        """The span's label: settable until it exits (a name known only once the span began: a server's route)."""
        return self._what[1]

    @label.setter
    def label(self, label: object) -> None:
        recording, _, args = self._what
        self._what = (recording, label, args)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        end_ns = _now()
        try:
            start_ns = self._start_ns
        except AttributeError:  # exited without being entered (an ExitStack.push, say): nothing to record
            return
        (sink, limit, wake_at, count_full), label, args = self._what
        if exc_type is not None:
            args = {**(args or {}), "exception": exc_type.__name__}
        held = len(sink)
        if held < limit:
            sink.extend((SPAN, label, start_ns, end_ns, args))
            if held == wake_at:
                _wake_flusher()
        else:
            count_full()


def _new_scope(recording: Recording, label: object, args: dict[str, Any] | None) -> Scope:
    """``Scope(recording, label, args)`` without the call to ``__init__``; inlined by hand in ``scope``."""
    scope: Scope = _new(Scope)
    scope._what = (recording, label, args)
    return scope


class _PyRecorder:
    """The recording methods of ``Timeline``, in Python (the C accelerator's ``RecorderCore`` does the same)."""

    _tls: threading.local
    #: Whether anything listens: set, under the lock, by ``Recorder._reset_recorders`` only.
    _listening: bool
    #: Values one buffer may hold: ``max_buffered_events * RECORD_FIELDS`` (the C recorder holds it in C).
    _max_buffered_values: int
    #: Values a buffer holds when the next event wakes the flusher: about half of ``_max_buffered_values``.
    _wake_buffered_values: int
    #: Bytes of compact records one thread may hold (the C recorder's instants; see ``RECORD_BYTES_PER_EVENT``).
    _max_buffered_record_bytes: int
    #: Counts one event refused for want of room in its buffer: ``next`` of an ``itertools.count``, which no other
    #: thread can interleave with (``+= 1`` on an attribute could lose a count).
    _count_full: Callable[[], object]

    def scope(self, label: object, /, **args: Any) -> Scope:
        """A context manager recording one span named ``label`` with ``args``, from enter to exit."""
        if _get_running_loop() is not None:
            return _new_scope(self._task_recording(), label, args or None)
        try:
            recording = self._tls.recording
        except AttributeError:
            recording = self._thread_recording()
        scope: Scope = _new(Scope)  # _new_scope, inlined
        scope._what = (recording, label, args or None)
        return scope

    def _scope_of(self, label: object, args: dict[str, Any] | None, /) -> Scope:
        """``scope(label, **args)``, ``args`` given as a dict the scope keeps (the caller made it for the scope: not
        copied again, as a call with ``**args`` would); a trace-aware scope's plain one (``trace_context.py``)."""
        if type(args) is not dict and args is not None:
            raise TypeError(f"_scope_of() takes its args as a dict or None, got {type(args).__name__}")
        if _get_running_loop() is not None:
            recording = self._task_recording()
        else:
            try:
                recording = self._tls.recording
            except AttributeError:
                recording = self._thread_recording()
        return _new_scope(recording, label, args or None)

    def instant(self, name: object, /, **args: Any) -> None:
        """Record a point-in-time event named ``name`` with ``args``."""
        if _get_running_loop() is not None:
            sink, limit, wake_at, count_full = self._task_recording()
        else:
            try:
                sink, limit, wake_at, count_full = self._tls.recording
            except AttributeError:
                sink, limit, wake_at, count_full = self._thread_recording()
        held = len(sink)
        if held < limit:
            now = _now()
            sink.extend((INSTANT, name, now, now, args or None))
            if held == wake_at:
                _wake_flusher()
        else:
            count_full()

    def push(self, event: Event) -> None:
        """Record a typed event (``ringtrace.client.Event``; see ``events.py``), with the time and an id unique in
        the process. Its fields are read and checked on the flusher: push a fresh event rather than change one."""
        if _get_running_loop() is not None:
            sink, limit, wake_at, count_full = self._task_recording()
        else:
            try:
                sink, limit, wake_at, count_full = self._tls.recording
            except AttributeError:
                sink, limit, wake_at, count_full = self._thread_recording()
        if sink is NOWHERE:
            return
        try:
            cls = type(event)  # as the C recorder: an Event class itself is not an event
            kind, label = cls._kind_id, cls._label
        except AttributeError:  # not an Event: never raise into the program
            self._not_an_event(event)
            return
        held = len(sink)
        if held >= limit:
            count_full()
            return
        now = _now()
        sink.extend((kind, label, now, now, event))
        if held == wake_at:
            _wake_flusher()

    def _events_with_room(self) -> Sink | None:
        """The buffer of the running task or thread if it has room for one more event; None if it keeps nothing, or
        is full (the event is then counted as dropped). Wakes the flusher if the event will make it half full."""
        if _get_running_loop() is not None:
            sink, limit, wake_at, count_full = self._task_recording()
        else:
            try:
                sink, limit, wake_at, count_full = self._tls.recording
            except AttributeError:
                sink, limit, wake_at, count_full = self._thread_recording()
        if sink is NOWHERE:
            return None
        held = len(sink)
        if held >= limit:
            count_full()
            return None
        if held == wake_at:
            _wake_flusher()  # before the append: an event that misses the sweep it started waits for the next
        return sink

    def marker(self, name: object, phase: str = "instant", /, **kwargs: Any) -> None:
        """Record a Gecko-style marker: ``"start"``, ``"end"`` or ``"instant"``, at ``ts_ns`` (a keyword: monotonic
        ns, for a marker made after the fact) or now. A start pairs with the next end of the same name on this track.

        Markers are recorded only while the timeline is observed (has a listener); otherwise this returns at once.
        ``stack=True`` adds the Python stack of the call to the details (which reads source files: not for hot
        paths). Other keywords are the marker's details.
        """
        if self._listening:
            self._marker(name, phase, **kwargs)

    def _marker(self, name: object, phase: str = "instant", /, **kwargs: Any) -> None:
        raise NotImplementedError

    def _thread_recording(self) -> Recording:
        raise NotImplementedError

    def _recording(self, events: list[Any] | None) -> Recording:
        raise NotImplementedError

    def _thread_events(self) -> list[Any] | None:
        raise NotImplementedError

    def _task_events(self) -> list[Any] | None:
        raise NotImplementedError

    def _not_an_event(self, event: object) -> None:
        raise NotImplementedError

    def _task_recording(self) -> Recording:
        raise NotImplementedError

    def _forget_recorders(self) -> None:
        """Nothing cached beyond ``_tls`` here."""

    def _cache_threads(self, enabled: bool) -> None:
        """Nothing cached beyond ``_tls`` here."""

    def _hint_lanes(self, lanes: object, task_switch: object, first_fit: int, /) -> None:
        """The C recorder takes the first free of the running thread's ``lanes`` for its next new task itself where
        it can (``speedups/first_lane.c``); here every new task takes the Python path, to the same lane."""

    def _take_unrecorded(self) -> int:
        """Events the C recorder could not record (a failed allocation, a full buffer); here one raises, and
        ``_count_full`` counts the others."""
        return 0


if TYPE_CHECKING or speedups is None:
    _RecorderBase = _PyRecorder
else:
    speedups.configure(NO_LOOP, SPAN, INSTANT, FLUSHER.wake)
    _RecorderBase = speedups.RecorderCore
if not TYPE_CHECKING and speedups is not None:
    Scope = speedups.Scope  # what scope() returns with the accelerator (the same behaviour)


class Recorder(_RecorderBase):
    """The hot path (``_PyRecorder`` or C) and its caches: where the running thread or task records.

    The slow paths here run once per thread per state change, and once per task: they find or make the buffer in
    ``_tracks`` under ``_lock``. The subclass says how its threads' tracks are named (``_track_label``) and makes
    sure something drains what they record (``_flusher_running``).
    """

    def __init__(self) -> None:
        # Re-entrant: a signal handler or a __del__ that records may run while this thread is in the slow path.
        self._lock = threading.RLock()
        self._tracks = Tracks()
        #: ``_tracks.task_buffers`` itself: read without the lock, and without going through ``_tracks``, on every
        #: event of a task.
        self._task_buffers: dict[Task[Any], TrackBuffer] = self._tracks.task_buffers
        #: Events refused since the last ``_take_refused`` (not an ``Event``, not a number...; or taken by a drain
        #: that raised), and whether the first refusal was warned about.
        self._not_events = 0
        self._warned_not_event = False
        #: Events refused by a full buffer on the Python paths: ``next`` counts one, ``_take_refused`` reads them.
        self._full = itertools.count()
        self._count_full = self._full.__next__
        self._full_taken = 0
        self._listening = False  # see _PyRecorder
        self._reset_recorders(False)

    @property
    def _track_label(self) -> str | None:
        """The name before a thread's in its track's name (None: the thread's name alone)."""
        raise NotImplementedError

    def _flusher_running(self) -> bool:
        """Whether the flusher runs (started now if need be); when it cannot, the subclass stops listening."""
        raise NotImplementedError

    def _thread_events(self) -> list[Any] | None:
        """Slow path, once per thread per state change: this thread's buffer, created if needed (None: keep
        nothing)."""
        tls = self._tls  # a concurrent _reset_recorders() replaces it: a stale answer then lands in the old one
        try:
            events: list[Any] | None = tls.events
            return events
        except AttributeError:
            pass
        with self._lock:
            listening = self._listening
            buffer = self._tracks.thread_buffer(self._track_label) if listening else None
            events = None if buffer is None else buffer.events
            tls.records = None if buffer is None else buffer.records
            tls.events = events
        # A forked child's flusher starts here, on first use, not inside the fork handler.
        if listening and not self._flusher_running():
            return None  # keep nothing rather than grow buffers nobody drains
        return events

    def _thread_records(self) -> Any:
        """The C recorder's slow path, right after ``_thread_events``: the account of compact records of this thread's
        buffer (``TrackBuffer.records``; None: it records none compactly)."""
        return getattr(self._tls, "records", None)

    def _thread_recording(self) -> Recording:
        """``_thread_events`` as the pure-Python recorder's ``Recording``, cached in the thread-local state."""
        tls = self._tls
        recording = self._recording(self._thread_events())
        tls.recording = recording
        return recording

    def _task_recording(self) -> Recording:
        """``_task_events`` as the pure-Python recorder's ``Recording``."""
        return self._recording(self._task_events())

    def _recording(self, events: list[Any] | None) -> Recording:
        """How to record into ``events`` (None: keep nothing), as the timeline's bound stands now (a change of the
        bound resets the recorders)."""
        sink: Sink = NOWHERE if events is None else events
        return (sink, self._max_buffered_values, self._wake_buffered_values, self._count_full)

    def _task_events(self) -> list[Any] | None:
        """The buffer of the running asyncio task: its lane's (the thread's, outside any task; None: keep
        nothing)."""
        task = current_task()
        if task is None:
            return self._thread_events()
        buffer = self._task_buffers.get(task)
        if buffer is not None:
            return buffer.events
        return self._lane_events(task)

    def _lane_events(self, task: Task[Any]) -> list[Any] | None:
        """Slow path, once per task (the C recorder's too, given the running task it found with no buffer): the
        buffer of a lane of this thread's, taken now (None: keep nothing)."""
        if self._thread_events() is None:
            return None
        with self._lock:
            tracks = self._tracks
            if tracks.taking_lane:  # (a collection recording while this thread takes a lane: see Tracks.taking_lane)
                return tracks.thread_buffer(self._track_label).events
            lane = tracks.take_lane(task, self._track_label, self._max_buffered_values, self._wake_buffered_values)
            # (where a server's next request looks, its request before done; not for green threads, which a thread
            # state does not tell apart, though the timeline was made before their library patched threading)
            if lane.index < FIRST_FIT and not _green_threads():
                self._hint_lanes(tracks.thread_lanes(lane), TASK_SWITCH, FIRST_FIT)
            return lane.buffer.events  # type: ignore[union-attr]  # (taken: it has a buffer)

    def _events(self) -> list[Any] | None:
        """The buffer of the running task or thread (None: keep nothing)."""
        if _get_running_loop() is not None:
            return self._task_events()
        try:
            events: list[Any] | None = self._tls.events
            return events
        except AttributeError:
            return self._thread_events()

    def _not_an_event(self, event: object) -> None:
        """``push`` was given something that is not an ``Event`` (counted only while something listens)."""
        if self._events() is not None:
            self._refuse(f"push() takes a ringtrace.client.Event, got {type(event).__name__}")

    def _refuse(self, what: str) -> None:
        """An event that cannot be recorded as asked: counted as dropped, and warned about once."""
        self._not_events += 1
        if not self._warned_not_event:
            self._warned_not_event = True
            log.warning("ringtrace: %s; dropped and counted (warned once per timeline)", what)

    def _take_refused(self) -> int:
        """Events refused or not recorded since the last call (counted as dropped). One caller at a time (the
        flusher's sweep)."""
        refused, self._not_events = self._take_unrecorded() + self._not_events, 0
        counted = next(self._full)  # this call's own count is not an event
        refused += counted - self._full_taken
        self._full_taken = counted + 1
        return refused

    def _reset_recorders(self, listening: bool) -> None:
        """Every thread takes the slow path once on its next event (the listeners, or the buffers, changed); sources
        record into a buffer of the tracks' while ``listening``, into nothing otherwise. Under the lock."""
        self._listening = listening
        self._tls = threading.local()
        self._forget_recorders()
        self._cache_threads(not _green_threads())
        self._tracks.attach_sources(self._recording if listening else None)
        if listening:
            _watch_asyncio()


_asyncio_watched = False


def _watch_asyncio() -> None:
    """Once, at the first listener: from when the program imports asyncio (now, if it has), the recorders ask it
    which loop runs. Before, none can: importing ringtrace neither imports asyncio nor changes the process."""
    global _asyncio_watched
    if not _asyncio_watched:
        _asyncio_watched = True
        when_asyncio(_use_asyncio)


def _use_asyncio(asyncio: ModuleType) -> None:
    """The program imported asyncio: ask it which loop runs (the C recorder probes where it keeps the loop, to read
    it there without a call), and which task each loop runs (the C recorder reads asyncio's table of them, where
    ``current_task`` does)."""
    global _get_running_loop
    events = asyncio.events
    _get_running_loop = events._get_running_loop
    if not TYPE_CHECKING and speedups is not None:
        speedups.configure(
            events._get_running_loop, SPAN, INSTANT, FLUSHER.wake, events._set_running_loop, _running_tasks(asyncio)
        )


def _running_tasks(asyncio: ModuleType) -> dict[Any, Any] | None:
    """asyncio's table of the task each loop runs, where its tasks keep them there (None: the C recorder asks
    ``current_task``): the pure-Python tasks always, asyncio's C module where it exports the table it fills (3.11 to
    3.13). From 3.14 the C module keeps the running task in the thread's state, and the table is the pure-Python
    tasks' alone: never filled, where it read as "no task runs" and put every task's events on its thread's track."""
    tasks = asyncio.tasks
    table = getattr(tasks, "_current_tasks", None)
    if type(table) is not dict:
        return None
    if getattr(tasks, "_enter_task", None) is getattr(tasks, "_py_enter_task", None):
        return table  # the pure-Python tasks enter there
    return table if getattr(sys.modules.get("_asyncio"), "_current_tasks", None) is table else None


def _green_threads() -> bool:
    """Whether a green-thread library (gevent, eventlet) made ``threading`` threads share OS thread states: then only
    ``threading.local`` (patched) tells them apart, and the C recorder must not cache a buffer per thread state."""
    gevent = sys.modules.get("gevent.monkey")
    if gevent is not None and gevent.is_module_patched("threading"):
        return True
    eventlet = sys.modules.get("eventlet.patcher")
    return eventlet is not None and bool(eventlet.is_monkey_patched("thread"))
