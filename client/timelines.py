"""The recording API: a Timeline, its per-track buffers, and the listeners it feeds.

Theory of operation
-------------------
Every recording thread gets a ``TrackBuffer`` on its first event, and the bound ``extend`` of that buffer's flat list
is cached in a ``threading.local``. Recording is then one ``list.extend`` of a 5-tuple: no lock, no id lookup, no
packing. The list is flat (five values per event) rather than a list of tuples: the encoder splits it into columns
with strided slices, in C, touching each value once, and no tuple outlives its call. The flusher takes events out
with ``drain()``, which copies a prefix and then deletes it (slices of ``events[:n]``, then ``del`` of the same
slices); these, and ``extend`` of a tuple, are each one atomic list operation, and recording only ever appends, so an
event racing with a drain lands whole either in the prefix or after it, never nowhere and never cut. Runs are taken
at most ``_RUN_VALUES`` values at a time, so that no single list operation holds the interpreter for long while a
recording thread waits.

Both choices keep the cyclic garbage collector out of the way: a buffer holds only numbers, labels and argument
maps, and ``None`` rather than an empty dict when there are no arguments.

asyncio: a task that records while its event loop runs gets a track of its own, a *lane* of its thread, so that the
spans of concurrent tasks never overlap on one track. A lane is taken by one task at a time and given back when the
flusher finds the task done, so the number of lanes follows the number of tasks alive at once, not the total.

A timeline with no listener, or a closed one, hands out ``_discard``, the extend of a ``deque(maxlen=0)``, which keeps
nothing. Adding or removing a listener swaps in a fresh ``threading.local`` (``_reset_recorders``): every thread then
takes the slow path once and picks up the new state.

The C accelerator (``accelerator.py``) replaces ``_PyRecorder``, the base class holding ``scope`` and ``instant``,
with one that does the same in C, caches the buffer of the last thread that recorded, and asks ``_thread_events`` and
``_task_events`` for the rest; it also drains buffers without touching the values (``take_runs``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import traceback
import weakref
from asyncio import Task, current_task
from asyncio.events import _get_running_loop
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from ringtrace.client.accelerator import speedups
from ringtrace.client.events import Event
from ringtrace.client.flusher import FLUSHER, Drained
from ringtrace.client.messages import PRIORITIES, Message, Sampling, message_kind, priority_level, set_gate
from ringtrace.client.sources import Source
from ringtrace.client.wire.errors import ConfigError
from ringtrace.client.wire.model import (
    ASYNC_BEGIN,
    ASYNC_END,
    ASYNC_TRACK,
    COUNTER,
    INSTANT,
    MARKER,
    MARKER_END,
    MARKER_START,
    RECORD_FIELDS,
    SPAN,
    THREAD_TRACK,
    TrackInfo,
    display_text,
    new_track_id,
)

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["DEFAULT_TIMELINE", "Listener", "MarkerScope", "Scope", "Timeline", "TrackBuffer"]

log = logging.getLogger("ringtrace.client")
_now = time.monotonic_ns
#: One event as recorded: ``RECORD_FIELDS`` values, extended onto a flat buffer.
Record = tuple[int, object, int, int, dict[str, Any] | None]
_discard: Callable[[Record], None] = deque[Any](maxlen=0).extend
_new = object.__new__
#: Values taken from a buffer in one list operation (8192 events).
_RUN_VALUES = 8192 * RECORD_FIELDS
_MARKER_KINDS = {"start": MARKER_START, "end": MARKER_END, "instant": MARKER}
#: Timestamps a marker may be given: monotonic ns, which an EVENTS header carries as an unsigned 64-bit field.
_MAX_NS = 2**63
#: Frames of Python stack a marker keeps with ``stack=True``.
_STACK_FRAMES = 32


class Listener(Protocol):
    """What a timeline hands its events to (see ``listeners.py``). Called on the flusher thread, except ``flush``
    and ``close``; none of these may raise."""

    def receive(self, track: TrackInfo, records: list[Any]) -> None:
        """One track's events, ``RECORD_FIELDS`` flat values each, oldest first."""

    def lost(self, events: int) -> None:
        """``events`` recorded for this listener were dropped before it received them (counted as its drops)."""

    def retire(self, track: TrackInfo) -> None:
        """``track`` ended (its thread or task is gone and all its events were received): forget it."""

    def flush(self, timeout_s: float) -> bool:
        """Deliver everything received so far within ``timeout_s``; True when delivered with nothing dropped."""

    def close(self, timeout_s: float) -> bool:
        """Flush, then release the listener's resources."""

    def after_fork(self) -> Listener | None:
        """In a forked child: the listener to use there instead of this one (None: none)."""


class Scope:
    """Context manager that records one complete span when it exits.

    ``Timeline.scope`` makes one without calling ``__init__`` (see ``_new_scope``): a call into a Python-level
    ``__init__`` is a good part of the cost of a span. The two set the same state.
    """

    __slots__ = ("_start_ns", "_what")

    def __init__(self, record: Callable[[Record], None], label: object, args: dict[str, Any] | None) -> None:
        self._what = (record, label, args)

    def __enter__(self) -> Scope:
        self._start_ns = _now()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        end_ns = _now()
        try:
            start_ns = self._start_ns
        except AttributeError:  # exited without being entered (an ExitStack.push, say): nothing to record
            return
        record, label, args = self._what
        if exc_type is not None:
            args = {**(args or {}), "exception": exc_type.__name__}
        record((SPAN, label, start_ns, end_ns, args))


class MarkerScope:
    """``Timeline.marker_scope``: a start marker at enter, the end marker at exit (with the exception's type)."""

    __slots__ = ("_details", "_name", "_timeline")

    def __init__(self, timeline: Timeline, name: object, details: dict[str, Any]) -> None:
        self._timeline, self._name, self._details = timeline, name, details

    def __enter__(self) -> MarkerScope:
        self._timeline.marker(self._name, "start", **self._details)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self._timeline.marker(self._name, "end")
        else:
            self._timeline.marker(self._name, "end", exception=exc_type.__name__)


def _new_scope(record: Callable[[Record], None], label: object, args: dict[str, Any] | None) -> Scope:
    """``Scope(record, label, args)`` without the call to ``__init__``; inlined by hand in ``Timeline.scope``."""
    scope: Scope = _new(Scope)
    scope._what = (record, label, args)
    return scope


class TrackBuffer:
    """The events one track recorded and the flusher has not taken yet, ``RECORD_FIELDS`` values each.

    ``owner`` is the thread, or the asyncio task, that records into it.
    """

    __slots__ = ("events", "owner", "track")

    def __init__(self, track: TrackInfo, owner: threading.Thread | Task[Any] | weakref.ref[Source]) -> None:
        self.events: list[Any] = []
        self.track = track
        self.owner = owner

    def owner_alive(self) -> bool:
        owner = self.owner
        if isinstance(owner, Task):  # a task left pending on a closed loop never ends
            return not owner.done() and not owner.get_loop().is_closed()
        if isinstance(owner, weakref.ref):  # a source: alive while someone can still open it
            return owner() is not None
        return owner.is_alive()


def _name_task(run: list[Any], name: str) -> None:
    """Adds the task's name to the args of the spans and instants of ``run`` (flat records of one lane)."""
    for i in range(0, len(run), RECORD_FIELDS):
        if run[i] == SPAN or run[i] == INSTANT:
            args = run[i + 4]
            if args is None:
                run[i + 4] = {"task": name}
            elif type(args) is dict and "task" not in args:
                run[i + 4] = {**args, "task": name}  # a copy: the caller may hold on to its map


class _PyRecorder:
    """The recording methods of ``Timeline``, in Python (the C accelerator's ``RecorderCore`` does the same)."""

    _tls: threading.local

    def scope(self, label: object, /, **args: Any) -> Scope:
        """A context manager recording one span named ``label`` with ``args``, from enter to exit."""
        if _get_running_loop() is not None:
            return _new_scope(self._task_recorder(), label, args or None)
        try:
            record = self._tls.record
        except AttributeError:
            record = self._thread_recorder()
        scope: Scope = _new(Scope)  # _new_scope, inlined
        scope._what = (record, label, args or None)
        return scope

    def instant(self, name: object, /, **args: Any) -> None:
        """Record a point-in-time event named ``name`` with ``args``."""
        if _get_running_loop() is not None:
            record = self._task_recorder()
        else:
            try:
                record = self._tls.record
            except AttributeError:
                record = self._thread_recorder()
        now = _now()
        record((INSTANT, name, now, now, args or None))

    def push(self, event: Event) -> None:
        """Record a typed event (``ringtrace.client.Event``; see ``events.py``), with the time and an id unique in
        the process. Its fields are read and checked on the flusher: push a fresh event rather than change one."""
        if _get_running_loop() is not None:
            events = self._task_events()
        else:
            try:
                events = self._tls.events
            except AttributeError:
                events = self._thread_events()
        if events is None:
            return
        try:
            cls = type(event)  # as the C recorder: an Event class itself is not an event
            kind, label = cls._kind_id, cls._label
        except AttributeError:  # not an Event: never raise into the program
            self._not_an_event(event)
            return
        now = _now()
        events.extend((kind, label, now, now, event))

    def _thread_recorder(self) -> Callable[[Record], None]:
        raise NotImplementedError

    def _thread_events(self) -> list[Any] | None:
        raise NotImplementedError

    def _task_events(self) -> list[Any] | None:
        raise NotImplementedError

    def _not_an_event(self, event: object) -> None:
        raise NotImplementedError

    def _task_recorder(self) -> Callable[[Record], None]:
        raise NotImplementedError

    def _forget_recorders(self) -> None:
        """Nothing cached beyond ``_tls`` here."""

    def _cache_threads(self, enabled: bool) -> None:
        """Nothing cached beyond ``_tls`` here."""

    def _take_unrecorded(self) -> int:
        """Events that could not be recorded (the C recorder counts a failed allocation; here one raises)."""
        return 0


if TYPE_CHECKING or speedups is None:
    _RecorderBase = _PyRecorder
else:
    speedups.configure(_get_running_loop, SPAN, INSTANT)
    _RecorderBase = speedups.RecorderCore
_take_runs = None if speedups is None else speedups.take_runs
if not TYPE_CHECKING and speedups is not None:
    Scope = speedups.Scope  # what scope() returns with the accelerator (the same behaviour)


class Timeline(_RecorderBase):
    """Records events from any number of threads and asyncio tasks into per-track buffers, for its listeners.

    Recording methods (``scope``, ``instant``; see ``_PyRecorder``) never raise and never block. Until a listener is
    attached, and after ``close()``, they keep nothing. ``ringtrace.client.default_timeline()`` is the process-wide
    one; make more to keep subsystems apart, each with listeners of its own (one listener may serve many timelines).

    Args:
        name: shown in logs; defaults to ``"timeline"``.
        listeners: attached at once (see ``add_listener``).
        max_buffered_events: events one track may hold between two flusher passes; if the flusher falls that far
            behind, the oldest are dropped and counted as every listener's drops.

    Raises:
        ConfigError: a bad ``max_buffered_events``.
    """

    def __init__(
        self, name: str = "timeline", listeners: Sequence[Listener] = (), *, max_buffered_events: int = 1_000_000
    ) -> None:
        self.name = name
        self.max_buffered_events = max_buffered_events
        # Re-entrant: a signal handler or a __del__ that records may run while this thread is in the slow path.
        self._lock = threading.RLock()
        _TIMELINES.add(self)
        self._buffers: list[TrackBuffer] = []
        self._sources: weakref.WeakValueDictionary[int, Source] = weakref.WeakValueDictionary()
        self._source_buffers: dict[int, TrackBuffer] = {}
        self._task_buffers: dict[Task[Any], TrackBuffer] = {}
        self._free_lanes: dict[int, list[TrackInfo]] = {}
        self._listeners: tuple[Listener, ...] = ()
        self._not_events = 0
        self._warned_not_event = False
        self._messages: weakref.WeakSet[Message] = weakref.WeakSet()
        self._priority_level = priority_level("info")
        self._sampling: Sampling | None = None
        self._reset_recorders()
        for listener in listeners:
            self.add_listener(listener)

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
            listening = bool(self._listeners)
            events = self._thread_buffer().events if listening else None
            tls.events = events
        # A forked child's flusher starts here, on first use, not inside the fork handler.
        if listening and not FLUSHER.start():
            self._close_listeners(time.monotonic())  # no flusher: keep nothing rather than grow buffers nobody drains
            return None
        return events

    def _thread_recorder(self) -> Callable[[Record], None]:
        """``_thread_events`` as the pure-Python recorder's callable, cached in the thread-local state."""
        tls = self._tls
        events = self._thread_events()
        record = _discard if events is None else events.extend
        tls.record = record
        return record

    def _thread_buffer(self) -> TrackBuffer:
        """This thread's buffer, created if needed; called under the lock."""
        thread = threading.current_thread()
        for buffer in self._buffers:
            if buffer.owner is thread:
                return buffer
        track = TrackInfo(new_track_id(), THREAD_TRACK, self._thread_track_name(thread), threading.get_native_id())
        created = TrackBuffer(track, thread)
        for buffer in self._buffers:  # a re-entrant call (a signal handler) may have made one meanwhile
            if buffer.owner is thread:
                return buffer
        self._buffers.append(created)
        return created

    def _thread_track_name(self, thread: threading.Thread) -> str:
        """The thread's name on the default timeline; on another, the timeline's name too, since the default's track
        of the same thread may be beside it (``disk (MainThread)``)."""
        if self is DEFAULT_TIMELINE:
            return display_text(thread.name)
        return display_text(f"{self.name} ({thread.name})")

    def _task_events(self) -> list[Any] | None:
        """The buffer of the running asyncio task: its lane's (the thread's, outside any task; None: keep
        nothing)."""
        task = current_task()
        if task is None:
            return self._thread_events()
        buffer = self._task_buffers.get(task)
        if buffer is not None:
            return buffer.events
        if self._thread_events() is None:
            return None
        with self._lock:
            parent = self._thread_buffer().track
            lanes = self._free_lanes.get(parent.track_id)
            if lanes:
                track = lanes.pop()
            else:
                lane_number = sum(1 for b in self._buffers if b.track.parent == parent.track_id) + 1
                name = display_text(f"{parent.name} tasks [{lane_number}]")
                track = TrackInfo(new_track_id(), ASYNC_TRACK, name, parent.thread_id, parent.track_id)
            buffer = TrackBuffer(track, task)
            self._buffers.append(buffer)
            self._task_buffers[task] = buffer
        return buffer.events

    def _task_recorder(self) -> Callable[[Record], None]:
        """``_task_events`` as the pure-Python recorder's callable."""
        events = self._task_events()
        return _discard if events is None else events.extend

    def _reset_recorders(self) -> None:
        """Every thread takes the slow path once on its next event (the listeners, or the buffers, changed); sources
        record into a buffer of this timeline's while it has listeners, into nothing otherwise. Under the lock."""
        self._tls = threading.local()
        self._forget_recorders()
        self._cache_threads(not _green_threads())
        if not self._listeners:
            self._source_buffers.clear()  # dead sources' entries too
        live = {id(b) for b in self._buffers}
        for source in list(self._sources.values()):
            self._attach_source(source, live)

    def _attach_source(self, source: Source, live: set[int]) -> None:
        """Under the lock: ``source`` records into its buffer here (made anew if ``live``, the ids of the buffers
        the timeline holds, lacks it) while the timeline has listeners, into nothing otherwise."""
        key = source.track.track_id
        buffer = self._source_buffers.get(key)
        if not self._listeners:
            self._source_buffers.pop(key, None)
            source._extend = _discard
        elif buffer is None or id(buffer) not in live:
            buffer = TrackBuffer(source.track, weakref.ref(source))
            self._buffers.append(buffer)
            self._source_buffers[key] = buffer
            source._extend = _first_use(source, buffer.events.extend)

    # -- the recording model ----------------------------------------------------------------------------------------

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

    def counter(self, name: object, value: float, /) -> None:
        """Record the value of the counter ``name`` now (a Chrome ``C`` event: a line graph per name)."""
        events = self._events()
        if events is None:
            return
        if type(value) is not int and type(value) is not float:
            try:
                value = float(value)
            except Exception:
                self._refuse(f"counter() takes a number, got {type(value).__name__}")
                return
        now = _now()
        events.extend((COUNTER, name, now, now, {"value": value}))

    def marker(self, name: object, phase: str = "instant", /, *, ts_ns: int | None = None, stack: bool = False,
               **details: Any) -> None:  # fmt: skip
        """Record a Gecko-style marker: ``"start"``, ``"end"`` or ``"instant"``, at ``ts_ns`` (monotonic ns, for a
        marker made after the fact) or now. A start pairs with the next end of the same name on this track.

        Markers are recorded only while the timeline is observed (has a listener); otherwise this returns at once.
        ``stack=True`` adds the Python stack of the call to the details (which reads source files: not for hot
        paths).
        """
        if not self._listeners:
            return
        kind = _MARKER_KINDS.get(phase) if type(phase) is str else None
        if kind is None or (ts_ns is not None and (type(ts_ns) is not int or not 0 <= ts_ns < _MAX_NS)):
            self._refuse("marker() takes 'start', 'end' or 'instant', and a ts_ns in monotonic ns")
            return
        if stack:
            details["stack"] = "".join(traceback.format_stack(limit=_STACK_FRAMES)[:-1])
        events = self._events()
        if events is not None:
            now = _now() if ts_ns is None else ts_ns
            events.extend((kind, name, now, now, details or None))

    def marker_scope(self, name: object, /, **details: Any) -> MarkerScope:
        """A context manager: a start marker when entered, the matching end marker when exited."""
        return MarkerScope(self, name, details)

    def source(self, name: object, /) -> Source:
        """A named source of activity on a track of its own (TimeLogger); see ``sources.py``. Make it once (this is
        the slow part); its ``open()`` and ``close()`` are cheap and may be called from any thread."""
        source = Source(display_text(name), _discard)
        with self._lock:
            self._sources[source.track.track_id] = source
            self._attach_source(source, set())  # a new source has no buffer yet
        return source

    def message(self, category: str, priority: str, text: str) -> Message:
        """Define a message (Snabb): call what this returns with up to six values to log it; see ``messages.py``.

        Define it once (at import or startup), not on each call. Messages of a priority past the timeline's
        (``set_priority``) cost one attribute test.

        Raises:
            ValueError: an unknown priority (the message lists them), or more than six ``$values``.
        """
        kind = message_kind(category, priority, text)
        message = Message(kind, self, False, priority_level(priority))
        with self._lock:
            self._messages.add(message)
            self._update_messages(message)
        return message

    @property
    def priority(self) -> str:
        """The least important priority recorded (``info`` at first)."""
        return PRIORITIES[self._priority_level]

    def set_priority(self, priority: str) -> None:
        """Record messages up to ``priority`` from now on (``"debug"``, say).

        Raises:
            ValueError: not one of ``fatal error warning info debug trace trace+ trace++ trace+++``.
        """
        level = priority_level(priority)
        with self._lock:
            self._priority_level = level
            for message in list(self._messages):
                self._update_messages(message)

    def sample(self, priority: str | None, fraction: float = 0.01, window_s: float = 0.001) -> None:
        """Record messages up to ``priority`` during a random ``fraction`` of windows ``window_s`` long, on top of
        ``set_priority``'s (Snabb's rate: an always-on recorder keeps a sample of detail). ``None`` stops sampling.

        Raises:
            ValueError: a bad priority, a fraction outside 0..1, a window not above 0.
        """
        sampling = None
        if priority is not None:
            numbers = all(type(x) in (int, float) and math.isfinite(x) for x in (fraction, window_s))
            if not numbers or not 0.0 <= fraction <= 1.0 or not window_s > 0:
                raise ValueError(f"sample() takes 0 <= fraction <= 1 and window_s > 0, got {fraction!r}, {window_s!r}")
            sampling = Sampling(priority_level(priority), fraction, max(int(window_s * 1e9), 1))
        with self._lock:
            self._sampling = sampling
            for message in list(self._messages):
                self._update_messages(message)

    def _update_messages(self, message: Message) -> None:
        """Under the lock: whether ``message`` records, and whether sampling may turn it on."""
        sampling = self._sampling
        sampled = sampling is not None and message.level <= sampling.level
        set_gate(message, message.level <= self._priority_level, sampling if sampled else None)

    def async_begin(self, name: object, async_id: int | str, /, **args: Any) -> None:
        """Begin an async slice: one that may end on another thread or task (``async_end`` with the same id)."""
        events = self._events()
        if events is not None:
            now = _now()
            events.extend((ASYNC_BEGIN, name, now, now, {**args, "id": async_id}))

    def async_end(self, name: object, async_id: int | str, /, **args: Any) -> None:
        """End the async slice ``name`` begun with ``async_id``."""
        events = self._events()
        if events is not None:
            now = _now()
            events.extend((ASYNC_END, name, now, now, {**args, "id": async_id}))

    # -- flusher side -----------------------------------------------------------------------------------------------

    def drain(self) -> Drained:
        """Take every buffered event (as flat values) per track; forget ended threads and tasks with nothing left.

        A track holding more than ``max_buffered_events`` (the flusher fell behind) loses its oldest events beyond
        that, counted in ``Drained.dropped``.
        """
        taken: list[tuple[TrackInfo, list[Any]]] = []
        dropped, self._not_events = self._take_unrecorded() + self._not_events, 0
        with self._lock:
            buffers = list(self._buffers)
        ended = []
        for buffer in buffers:
            alive = buffer.owner_alive()  # before len(): an owner dead by now appends nothing after it
            events = buffer.events
            count = len(events)
            excess = count - self._max_buffered_values
            if excess > 0:
                excess -= excess % RECORD_FIELDS
                del events[:excess]
                count -= excess
                dropped += excess // RECORD_FIELDS
            first = len(taken)
            if _take_runs is not None:  # C: the values move, untouched, in one pass
                taken += [(buffer.track, run) for run in _take_runs(events, count, _RUN_VALUES)]
            else:
                # Copy the runs first, then delete them from the last one back: each delete then moves only the
                # values appended since the drain began, where deleting from the front would move the rest of the
                # buffer every time (quadratic in a buffer that grew while the flusher was busy).
                runs = [(start, min(start + _RUN_VALUES, count)) for start in range(0, count, _RUN_VALUES)]
                taken += [(buffer.track, events[start:end]) for start, end in runs]  # never past count
                for start, end in reversed(runs):
                    del events[start:end]
            if isinstance(buffer.owner, Task):  # a lane serves many tasks in turn: each slice says whose it is
                name = buffer.owner.get_name()
                for _, run in taken[first:]:
                    _name_task(run, name)
            if not alive and not events:
                ended.append(buffer)
        if ended:
            self._forget(ended)
        return Drained(self._lane_parents(buffers, taken) + taken, [buffer.track for buffer in ended], dropped)

    @staticmethod
    def _lane_parents(buffers: list[TrackBuffer], taken: list[tuple[TrackInfo, list[Any]]]) -> list[Any]:
        """An empty run for each thread whose lanes have events and it none, so that listeners declare its track (a
        reader names the lanes' thread by it; on the wire a track is declared with its first events)."""
        lane_parents = {track.parent for track, _ in taken if track.kind == ASYNC_TRACK and track.parent}
        if not lane_parents:
            return []
        lane_parents -= {track.track_id for track, _ in taken}
        return [(b.track, []) for b in buffers if b.track.track_id in lane_parents and b.track.kind == THREAD_TRACK]

    def _forget(self, ended: list[TrackBuffer]) -> None:
        # The C recorder's cache may hold a forgotten buffer: under gevent, greenlets share one thread state.
        self._forget_recorders()
        with self._lock:
            gone = {id(b) for b in ended}
            self._buffers = [b for b in self._buffers if id(b) not in gone]
            for buffer in ended:
                owner = buffer.owner
                if isinstance(owner, Task):
                    self._task_buffers.pop(owner, None)
                    self._free_lanes.setdefault(buffer.track.parent, []).append(buffer.track)
                elif isinstance(owner, weakref.ref):
                    self._source_buffers.pop(buffer.track.track_id, None)
                else:
                    self._free_lanes.pop(buffer.track.track_id, None)

    def tracks(self) -> list[TrackInfo]:
        """The tracks whose owners recorded and still may."""
        with self._lock:
            return [buffer.track for buffer in self._buffers]

    def renamed_threads(self) -> list[TrackInfo]:
        """Thread tracks whose thread was renamed since it started recording, updated to the new name."""
        renamed = []
        with self._lock:
            for buffer in self._buffers:
                owner = buffer.owner
                if isinstance(owner, threading.Thread) and self._thread_track_name(owner) != buffer.track.name:
                    old = buffer.track
                    buffer.track = TrackInfo(old.track_id, old.kind, self._thread_track_name(owner), old.thread_id)
                    renamed.append(buffer.track)
        return renamed

    # -- listeners and lifecycle ----------------------------------------------------------------------------------

    @property
    def max_buffered_events(self) -> int:
        """Events one track may hold between two flusher passes (about 100 bytes each); see the class docstring."""
        return self._max_buffered_values // RECORD_FIELDS

    @max_buffered_events.setter
    def max_buffered_events(self, events: int) -> None:
        if isinstance(events, bool) or not isinstance(events, int) or events < 1:
            raise ConfigError(f"max_buffered_events must be an int >= 1, got {events!r}")
        self._max_buffered_values = events * RECORD_FIELDS

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return self._listeners

    @property
    def dropped_events(self) -> int:
        """Events recorded here that a listener could not deliver, summed over the listeners attached now."""
        return sum(int(getattr(listener, "dropped_events", 0)) for listener in self._listeners)

    def add_listener(self, listener: Listener) -> None:
        """Hand this timeline's events to ``listener`` too (from the next flusher pass on)."""
        _subscribe_priority(listener, self)
        with self._lock:
            if listener not in self._listeners:
                self._listeners = (*self._listeners, listener)
            self._reset_recorders()
        FLUSHER.register(self)

    def remove_listener(self, listener: Listener) -> None:
        """Stop handing events to ``listener``, after handing it everything recorded so far.

        With no listener left the timeline stops keeping events. The caller closes ``listener`` if it is done.
        """
        with FLUSHER.sweeping():  # no sweep can take events between the last one and the change
            FLUSHER.sweep(self)
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not listener)
                left = self._listeners
                if not left:
                    buffers, self._buffers, self._task_buffers = self._buffers, [], {}
                self._reset_recorders()
        if not left:
            FLUSHER.unregister(self)
            _count_lost((listener,), buffers)  # recorded in the instant between the sweep and now

    def replace_listener(self, old: Listener, new: Listener) -> None:
        """Hand ``old`` everything recorded so far, then hand ``new`` what comes next; no event falls between."""
        _subscribe_priority(new, self)
        with FLUSHER.sweeping():
            FLUSHER.sweep(self)
            with self._lock:
                self._listeners = tuple(new if x is old else x for x in self._listeners)
                if new not in self._listeners:
                    self._listeners = (*self._listeners, new)
                self._reset_recorders()
        FLUSHER.register(self)

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Hand everything recorded so far to the listeners and wait, at most ``timeout_s``, until they delivered it.

        With a collector streamer this tries to connect at once if it is not connected, and waits for the collector
        to acknowledge that it stored everything.

        Returns:
            True when every listener delivered, and none dropped an event since the previous flush; False when there
            is no listener, when time ran out (what was not handed over yet goes on in the background), or after a
            drop (each listener's counters say how many).
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        listeners = self._listeners
        if not listeners:
            return False
        delivered = FLUSHER.sweep(self, deadline)
        for listener in listeners:
            delivered = listener.flush(max(deadline - time.monotonic(), 0.0)) and delivered
        return delivered

    def close(self, timeout_s: float = 2.0) -> bool:
        """Flush (within ``timeout_s``), stop recording, and close every listener no other timeline uses.

        What could not be handed to the listeners in time is counted as their drops.

        Returns:
            True when everything recorded was delivered.
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        if not self._listeners:
            return False
        return self._close_listeners(deadline)

    def _close_listeners(self, deadline: float) -> bool:
        """Hand over what there is time for, stop recording, count the rest as lost, close the listeners."""
        handed_over = FLUSHER.sweep(self, deadline)
        with FLUSHER.sweeping(deadline):  # no sweep can take events between the last one and the change
            with self._lock:
                listeners, self._listeners = self._listeners, ()
                buffers, self._buffers, self._task_buffers = self._buffers, [], {}
                self._reset_recorders()
            FLUSHER.unregister(self)
            _count_lost(listeners, buffers, FLUSHER.take_carried(self))
        still_used = {id(x) for timeline in FLUSHER.timelines() for x in timeline.listeners}
        delivered = handed_over
        for listener in listeners:
            if id(listener) not in still_used:
                delivered = listener.close(max(deadline - time.monotonic(), 0.0)) and delivered
        return delivered

    def after_fork_in_child(self, replacements: dict[int, Any]) -> None:
        """In a forked child: the parent's lock state and buffers do not carry over; listeners say what replaces
        them (a new streamer to the same collector, say), once each, so a listener shared by timelines stays shared.
        """
        self._lock = threading.RLock()
        self._buffers = []
        self._task_buffers = {}
        self._free_lanes = {}
        self._source_buffers = {}
        listeners = []
        for listener in self._listeners:
            if id(listener) not in replacements:
                replacements[id(listener)] = listener.after_fork()
            if replacements[id(listener)] is not None:
                listeners.append(replacements[id(listener)])
        self._listeners = tuple(listeners)
        for listener in listeners:
            _subscribe_priority(listener, self)
        self._reset_recorders()


#: Every timeline, listened to or not: a forked child gets fresh locks for all of them (``_fresh_locks``).
_TIMELINES: weakref.WeakSet[Timeline] = weakref.WeakSet()


def _fresh_locks() -> None:
    """In a forked child: a lock another thread of the parent held at the fork would never be released. The flusher's
    own fork handler, for timelines with listeners, resets the rest of their state after this."""
    for timeline in list(_TIMELINES):
        timeline._lock = threading.RLock()


# The one hook importing ringtrace installs (the flusher's come with the first listener): without it, a child whose
# parent was defining a message or a source on another thread at the fork would hang at its first definition.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks)


def _first_use(source: Source, extend: Callable[[Record], None]) -> Callable[[Record], None]:
    """A source's recorder until its first event: starts the flusher (never inside a fork handler, so here), then
    hands over to the buffer's extend."""

    def first(record: Record) -> None:
        source._extend = extend
        if FLUSHER.start():
            extend(record)

    return first


def _subscribe_priority(listener: Listener, timeline: Timeline) -> None:
    """A listener that hears a collector (the streamer) passes its SET_PRIORITY frames on to ``timeline``."""
    subscribe = getattr(listener, "subscribe_priority", None)
    if subscribe is not None:
        subscribe(timeline)


def _green_threads() -> bool:
    """Whether a green-thread library (gevent, eventlet) made ``threading`` threads share OS thread states: then only
    ``threading.local`` (patched) tells them apart, and the C recorder must not cache a buffer per thread state."""
    gevent = sys.modules.get("gevent.monkey")
    if gevent is not None and gevent.is_module_patched("threading"):
        return True
    eventlet = sys.modules.get("eventlet.patcher")
    return eventlet is not None and bool(eventlet.is_monkey_patched("thread"))


def _count_lost(listeners: Sequence[Listener], buffers: list[TrackBuffer], carried: int = 0) -> None:
    """Events that were recorded for ``listeners`` and will never reach them: counted as their drops."""
    lost = carried + sum(len(buffer.events) for buffer in buffers) // RECORD_FIELDS
    if lost:
        for listener in listeners:
            listener.lost(lost)


#: The process-wide timeline: ``ringtrace.client.default_timeline()``, which ``connect()`` streams.
DEFAULT_TIMELINE: Final = Timeline("default")
