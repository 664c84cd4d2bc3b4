"""The recording API: a Timeline, the facade over the parts that record, keep, gate and hand over its events.

- ``recorder.py``: the hot path (``scope``, ``instant``, ``push``; in C when the accelerator is built) and the caches
  that find the running thread's or task's buffer. ``Timeline`` subclasses it: nothing on the hot path goes through
  another object.
- ``tracks.py``: the buffers of threads, asyncio lanes and sources, and the tables that find them.
- ``drain.py``: taking events out of the buffers, for the flusher.
- ``gates.py``: which messages record (priority and sampling).
- ``timeline_listeners.py``: what a timeline asks of its listeners, and the bookkeeping of losing or replacing them.

``Timeline`` holds the one lock the parts are used under, and the listeners: adding, replacing or removing one is a
change of the whole (the flusher sweeps, buffers go, every recorder takes its slow path once).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from ringtrace.client.delivery.flusher import FLUSHER, Drained
from ringtrace.client.recording import gates
from ringtrace.client.recording.drain import Run, events_in, events_taken, lane_parents, take_events
from ringtrace.client.recording.gates import MessageGates
from ringtrace.client.recording.incident_calls import record_incident
from ringtrace.client.recording.messages import Message, message_kind
from ringtrace.client.recording.recorder import Recorder, Scope
from ringtrace.client.recording.sources import Source
from ringtrace.client.recording.timeline_listeners import (
    Listener,
    close_unused,
    count_lost,
    replaced_after_fork,
    subscribe_priority,
)
from ringtrace.client.recording.trace_context import TraceScope, new_trace_scope
from ringtrace.client.recording.tracks import NOT_RECORDING, EndedThread, TrackBuffer, only_tasks_own
from ringtrace.wire.arg_values import display_text
from ringtrace.wire.errors import ConfigError
from ringtrace.wire.message_format import PRIORITIES, priority_level
from ringtrace.wire.model import (
    ASYNC_BEGIN,
    ASYNC_END,
    COUNTER,
    MARKER,
    MARKER_END,
    MARKER_START,
    RECORD_FIELDS,
    TrackInfo,
)

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["DEFAULT_TIMELINE", "CallSource", "Listener", "MarkerScope", "Scope", "Timeline", "TrackBuffer"]

_now = time.monotonic_ns
_MARKER_KINDS = {"start": MARKER_START, "end": MARKER_END, "instant": MARKER}
#: Timestamps a marker may be given: monotonic ns, which an EVENTS header carries as an unsigned 64-bit field.
_MAX_NS = 2**63
#: Frames of Python stack a marker keeps with ``stack=True``.
_STACK_FRAMES = 32


#: Bytes of compact records (the C recorder's instants with flat arguments: 28 bytes and their packed arguments each)
#: one thread may hold per event of ``max_buffered_events``: 12.8 MB at the default 200,000, on top of the bound of its
#: buffer list (``max_buffered_events`` events, 100 to 300 bytes each).
RECORD_BYTES_PER_EVENT: Final = 64


class CallSource(Protocol):
    """What traces function calls for a timeline (``ringtrace.client.functions``): its drain gives runs of calls per
    thread."""

    def drain_calls(self) -> tuple[list[tuple[threading.Thread | EndedThread, Any, Any]], int]:
        """The calls recorded since the last drain as (thread, asyncio task or None, ``CallRun``) runs, and the calls
        dropped since (buffers full)."""
        ...


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


class Timeline(Recorder):
    """Records events from any number of threads and asyncio tasks into per-track buffers, for its listeners.

    Recording methods (``scope``, ``instant``; see ``recorder.py``) never raise and never block. Until a listener is
    attached, and after ``close()``, they keep nothing. ``ringtrace.client.default_timeline()`` is the process-wide
    one; make more to keep subsystems apart, each with listeners of its own (one listener may serve many timelines).

    Args:
        name: shown in logs; defaults to ``"timeline"``.
        listeners: attached at once (see ``add_listener``).
        max_buffered_events: events one track may hold until the flusher takes them; if the flusher falls that far
            behind, the events that come next are refused, counted as every listener's drops. A thread that
            outruns the flusher holds that many, and about as many again in the flusher's hands: 200,000 instants
            with two small args, about 110 MB in all (docs/client.md).

    Raises:
        ConfigError: a bad ``max_buffered_events``.
    """

    def __init__(
        self, name: str = "timeline", listeners: Sequence[Listener] = (), *, max_buffered_events: int = 200_000
    ) -> None:
        self.name = name
        super().__init__()
        self.max_buffered_events = max_buffered_events
        _TIMELINES.add(self)
        self._listeners: tuple[Listener, ...] = ()
        self._gates = MessageGates()
        self._call_sources: tuple[CallSource, ...] = ()
        for listener in listeners:
            self.add_listener(listener)

    @property
    def _track_label(self) -> str | None:
        """The default timeline's thread tracks bear the thread's name; another's its own name too, since the
        default's track of the same thread may be beside it (``disk (MainThread)``)."""
        return None if self is DEFAULT_TIMELINE else self.name

    def _flusher_running(self) -> bool:
        if FLUSHER.start():
            return True
        self._close_listeners(time.monotonic())  # no flusher: keep nothing rather than grow buffers nobody drains
        return False

    # -- the recording model ----------------------------------------------------------------------------------------

    def counter(self, name: object, value: float, /) -> None:
        """Record the value of the counter ``name`` now (a Chrome ``C`` event: a line graph per name and thread)."""
        events = self._events_with_room()
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

    def _marker(self, name: object, phase: str = "instant", /, *, ts_ns: int | None = None, stack: bool = False,
                **details: Any) -> None:  # fmt: skip
        """``marker()`` once it found the timeline observed (see ``_PyRecorder.marker``; the C recorder's returns
        from C while nothing listens)."""
        if not self._listeners:  # the last listener went meanwhile
            return
        kind = _MARKER_KINDS.get(phase) if type(phase) is str else None
        if kind is None or (ts_ns is not None and (type(ts_ns) is not int or not 0 <= ts_ns < _MAX_NS)):
            self._refuse("marker() takes 'start', 'end' or 'instant', and a ts_ns in monotonic ns")
            return
        if stack:
            details["stack"] = _caller_stack()
        events = self._events_with_room()
        if events is not None:
            now = _now() if ts_ns is None else ts_ns
            events.extend((kind, name, now, now, details or None))

    def trace_scope(self, label: object, /, kind: str = "internal", headers: Any = None, **args: Any) -> TraceScope:
        """A context manager recording one span of a trace (``trace_context.py``): ``scope``'s span, with the span's
        ``trace_id``, ``span_id``, ``parent_span_id`` and ``kind`` among its args, and the current span while open.

        Its parent is the caller's span named by ``headers`` for a ``server`` or ``consumer`` span, else the current
        span (ringtrace's or OpenTelemetry's), else none: a new trace. For a ``client`` or ``producer`` span,
        ``traceparent`` naming it is written into ``headers``, for the callee. Never raises.
        """
        return new_trace_scope(self._scope_of, label, kind, headers, args)

    def server_span(self, label: object, /, headers: Any, **args: Any) -> TraceScope:
        """``trace_scope(label, "server", headers)``: handling a request, in the trace its ``headers`` name (a new
        trace if they name none, or one the W3C rules call invalid)."""
        return new_trace_scope(self._scope_of, label, "server", headers, args)

    def client_span(self, label: object, /, headers: Any = None, **args: Any) -> TraceScope:
        """``trace_scope(label, "client", headers)``: a call to another process, in the current trace (a new one
        outside any), its ``traceparent`` written into the outgoing ``headers``."""
        return new_trace_scope(self._scope_of, label, "client", headers, args)

    def marker_scope(self, name: object, /, **details: Any) -> MarkerScope:
        """A context manager: a start marker when entered, the matching end marker when exited."""
        return MarkerScope(self, name, details)

    def source(self, name: object, /) -> Source:
        """A named source of activity on a track of its own (TimeLogger); see ``sources.py``. Make it once (this is
        the slow part); its ``open()`` and ``close()`` are cheap and may be called from any thread."""
        return self.add_source(Source(display_text(name), NOT_RECORDING))

    def add_source(self, source: Source) -> Source:
        """Record ``source`` (made elsewhere: a sampler's track of a thread, say) here; returns it."""
        with self._lock:
            self._tracks.add_source(source, self._recording if self._listening else None)
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
            self._gates.add(message)
        return message

    @property
    def priority(self) -> str:
        """The least important priority recorded (``info`` at first)."""
        return PRIORITIES[self._gates.level]

    def set_priority(self, priority: str) -> None:
        """Record messages up to ``priority`` from now on (``"debug"``, say).

        Raises:
            ValueError: not one of ``fatal error warning info debug trace trace+ trace++ trace+++``.
        """
        level = priority_level(priority)
        with self._lock:
            self._gates.set_level(level)

    def watch_priority(self, watcher: Callable[[str], None]) -> None:
        """Call ``watcher(priority)`` after each ``set_priority`` (a collector's SET_PRIORITY included), on the thread
        that set it, under the timeline's lock: it must be quick, must not raise, and must not call the timeline."""
        with self._lock:
            self._gates.watchers.append(lambda level: watcher(PRIORITIES[level]))

    def sample(self, priority: str | None, fraction: float = 0.01, window_s: float = 0.001) -> None:
        """Record messages up to ``priority`` during a random ``fraction`` of windows ``window_s`` long, on top of
        ``set_priority``'s (Snabb's rate: an always-on recorder keeps a sample of detail). ``None`` stops sampling.

        Raises:
            ValueError: a bad priority, a fraction outside 0..1, a window not above 0.
        """
        sampling = gates.sampling(priority, fraction, window_s)
        with self._lock:
            self._gates.set_sampling(sampling)

    def async_begin(self, name: object, async_id: int | str, /, **args: Any) -> None:
        """Begin an async slice: one that may end on another thread or task (``async_end`` with the same id)."""
        events = self._events_with_room()
        if events is not None:
            now = _now()
            events.extend((ASYNC_BEGIN, name, now, now, {**args, "id": async_id}))

    def async_end(self, name: object, async_id: int | str, /, **args: Any) -> None:
        """End the async slice ``name`` begun with ``async_id``."""
        events = self._events_with_room()
        if events is not None:
            now = _now()
            events.extend((ASYNC_END, name, now, now, {**args, "id": async_id}))

    def incident(self, reason: str, /, **args: Any) -> None:
        """Record that something went wrong here: an ``incident`` event named ``reason``, with ``args``, sent at once
        (a collector's rules may keep the recent past of the processes involved; see ``incident_calls.py``)."""
        record_incident(self, reason, args)

    # -- flusher side -----------------------------------------------------------------------------------------------

    def drain(self) -> Drained:
        """Take every buffered event (as flat values) per track; forget ended threads and tasks with nothing left.

        ``Drained.dropped`` counts the events refused since the last drain (a full buffer, a bad ``push``...) and
        those a drain that raised had taken. An instant's arguments may be a ``Keywords`` (``keyword_args.as_map``)."""
        dropped = self._take_refused()
        runs: list[tuple[threading.Thread | EndedThread, Any, Any]] = []
        taken: list[Run] = []  # (filled as events leave their buffers: see drain.py)
        try:
            for source in self._call_sources:  # (first: a thread's buffer made here for them is drained below)
                drained, lost = source.drain_calls()
                runs += drained
                dropped += lost
            with self._lock:
                calls = self._tracks.call_tracks(runs, self._track_label) if runs else []
                buffers = list(self._tracks.buffers)
            ended, ended_tracks = take_events(buffers, taken)[1], []
            if ended:  # (the C recorder's caches may hold a thread's buffer: gevent's greenlets share a thread state)
                if not only_tasks_own(ended):  # (a task's leaves them be: see first_lane.c)
                    self._forget_recorders()
                with self._lock:
                    ended_tracks = self._tracks.forget(ended)
            return Drained(lane_parents(buffers, calls + taken) + calls + taken, ended_tracks, dropped)
        except BaseException:  # what it took reaches no listener: counted as dropped by the next drain
            self._not_events += dropped + events_in(run for *_, run in runs) + events_taken(taken)
            raise

    def add_call_source(self, source: CallSource) -> None:
        """Drain ``source``'s traced calls with this timeline's events, each thread's onto its track (a task's lane)."""
        with self._lock:
            if source not in self._call_sources:
                self._call_sources = (*self._call_sources, source)
                self._tracks.remember_tasks()

    def remove_call_source(self, source: CallSource) -> None:
        """Drain ``source`` no more (the caller drains it one last time first: ``FLUSHER.sweep``)."""
        with self._lock:
            self._call_sources = tuple(x for x in self._call_sources if x is not source)

    def tracks(self) -> list[TrackInfo]:
        """The tracks whose owners recorded and still may."""
        with self._lock:
            return self._tracks.infos()

    def renamed_threads(self) -> list[TrackInfo]:
        """Thread tracks whose thread was renamed since it started recording, updated to the new name."""
        with self._lock:
            return self._tracks.renamed_threads(self._track_label)

    # -- listeners and lifecycle ----------------------------------------------------------------------------------

    @property
    def max_buffered_events(self) -> int:
        """Events one track may hold until the flusher takes them (100 to 300 bytes each); see the class docstring."""
        return self._max_buffered_values // RECORD_FIELDS

    @max_buffered_events.setter
    def max_buffered_events(self, events: int) -> None:
        if isinstance(events, bool) or not isinstance(events, int) or events < 1:
            raise ConfigError(f"max_buffered_events must be an int >= 1, got {events!r}")
        with self._lock:
            self._max_buffered_values = events * RECORD_FIELDS
            self._wake_buffered_values = max(events // 2, 1) * RECORD_FIELDS
            self._max_buffered_record_bytes = events * RECORD_BYTES_PER_EVENT
            self._reset_recorders(self._listening)  # the Python recorder caches the bound per thread

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return self._listeners

    @property
    def dropped_events(self) -> int:
        """Events recorded here that a listener could not deliver, summed over the listeners attached now."""
        return sum(int(getattr(listener, "dropped_events", 0)) for listener in self._listeners)

    def add_listener(self, listener: Listener) -> None:
        """Hand this timeline's events to ``listener`` too (from the next flusher pass on)."""
        subscribe_priority(listener, self)
        with self._lock:
            if listener not in self._listeners:
                self._listeners = (*self._listeners, listener)
            self._reset_recorders(True)
        FLUSHER.register(self)

    def remove_listener(self, listener: Listener) -> None:
        """Stop handing events to ``listener``, after handing it everything recorded so far.

        With no listener left the timeline stops keeping events. The caller closes ``listener`` if it is done.
        """
        with FLUSHER.sweeping():  # no sweep can take events between the last one and the change
            FLUSHER.sweep(self)
            with self._lock:
                self._listeners = left = tuple(x for x in self._listeners if x is not listener)
                if not left:
                    buffers = self._tracks.take_all()
                self._reset_recorders(bool(left))
        if not left:
            FLUSHER.unregister(self)
            count_lost((listener,), buffers)  # recorded in the instant between the sweep and now
        else:
            FLUSHER.register(self)  # the listener gone may have set the flusher's pace: it reads it again

    def replace_listener(self, old: Listener, new: Listener) -> None:
        """Hand ``old`` everything recorded so far, then hand ``new`` what comes next; no event falls between."""
        subscribe_priority(new, self)
        with FLUSHER.sweeping():
            FLUSHER.sweep(self)
            with self._lock:
                self._listeners = tuple(new if x is old else x for x in self._listeners)
                if new not in self._listeners:
                    self._listeners = (*self._listeners, new)
                self._reset_recorders(True)
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
                buffers = self._tracks.take_all()
                self._reset_recorders(False)
            FLUSHER.unregister(self)
            count_lost(listeners, buffers, FLUSHER.take_carried(self))
        still_used = [x for timeline in FLUSHER.timelines() for x in timeline.listeners]
        return close_unused(listeners, still_used, deadline) and handed_over

    def after_fork_in_child(self, replacements: dict[int, Any]) -> None:
        """In a forked child: the parent's lock state and buffers do not carry over; listeners say what replaces
        them (a new streamer to the same collector, say), once each, so a listener shared by timelines stays shared.
        """
        self._lock = threading.RLock()
        self._tracks.after_fork_in_child()
        self._listeners = replaced_after_fork(self._listeners, replacements)
        for listener in self._listeners:
            subscribe_priority(listener, self)
        self._reset_recorders(bool(self._listeners))


def _caller_stack() -> str:
    """The Python stack of the call to ``marker()``, up to ``_STACK_FRAMES`` frames, without ringtrace's own (the
    pure-Python ``marker`` has a frame of its own, the C one none)."""
    frames = traceback.extract_stack(limit=_STACK_FRAMES + 3)
    while frames and frames[-1].filename in _OWN_FILES:
        frames.pop()
    return "".join(traceback.format_list(frames[-_STACK_FRAMES:]))


_OWN_FILES = {__file__, sys.modules[Recorder.__module__].__file__}

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


#: The process-wide timeline: ``ringtrace.client.default_timeline()``, which ``connect()`` streams.
DEFAULT_TIMELINE: Final = Timeline("default")
