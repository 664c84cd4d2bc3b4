"""OpenTelemetry's spans on ringtrace's tracks: a span processor for the OpenTelemetry SDK's ``TracerProvider``.

    from opentelemetry.sdk.trace import TracerProvider
    import ringtrace.client, ringtrace.client.otel

    tl = ringtrace.client.connect("127.0.0.1:7700", process_name="shop")
    provider = TracerProvider()
    provider.add_span_processor(ringtrace.client.otel.SpanProcessor(tl))

Each OpenTelemetry span the program starts is then also a ringtrace span, recorded as OpenTelemetry ended it: from
its ``start_time`` to its ``end_time``, on the track of the thread or asyncio task that started it (taken at
``on_start``; recorded at ``on_end``), with its ids as args (``trace_id``, ``span_id``, ``parent_span_id``, ``kind``,
as a ``trace_scope``'s), its final attributes, its ``status`` (``error`` or ``ok``, and ``status_message``), and each
of its events (the exception it ended by, say) as an instant on that track, as the OTLP receiver records them: a span
in error is one to ``/spans?has_error=yes``. The plain scopes the program records inside it are on the same track,
within it: ``?trace_id=`` selects them with it, which it cannot do for a span that reaches the collector only as OTLP
(another process, as far as the collector can tell).

Never imports OpenTelemetry: it has the methods the SDK calls on a span processor, and reads only what every SDK span
has (``get_span_context()``, ``parent``, ``kind``, ``name``, ``attributes``, ``status``, ``events``, ``links``,
``start_time``, ``end_time``). Nothing raises into the program: a span it cannot read, one still open when
``MAX_OPEN_SPANS`` others are, or one that ends after the task or thread that started it (whose track then shows
another task's work, or is gone), is not recorded, and counted as a dropped event (warned about once).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from asyncio import Task, current_task
from asyncio.events import _get_running_loop
from collections import OrderedDict
from typing import Any, Final

from ringtrace.client.delivery.flusher import FLUSHER
from ringtrace.client.recording.timelines import DEFAULT_TIMELINE, Timeline
from ringtrace.client.recording.tracks import Record, Recording, thread_alive
from ringtrace.wire.model import INSTANT, SPAN

__all__ = ["MAX_OPEN_SPANS", "SpanProcessor"]

_now = time.monotonic_ns
_wake_flusher = FLUSHER.wake

#: Spans a processor keeps open at once, at most; past it the one open longest is let go (a span never ended).
MAX_OPEN_SPANS: Final = 100_000


class SpanProcessor:
    """Records each OpenTelemetry span as a ringtrace span of ``timeline`` (the process-wide one by default), on the
    track of the thread or task that starts it (see the module's docstring)."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        self._timeline = DEFAULT_TIMELINE if timeline is None else timeline
        #: Where each span open records, and the task or thread that started it, by (trace id, span id).
        self._open: OrderedDict[tuple[int, int], tuple[Recording, Task[Any] | threading.Thread]] = OrderedDict()
        self._lock = threading.Lock()
        _PROCESSORS.add(self)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """The span began, in the thread or task that records it: where it will be recorded is taken there."""
        try:
            context = span.get_span_context()
            key = (context.trace_id, context.span_id)
        except Exception:
            self._timeline._refuse("an OpenTelemetry span this SpanProcessor cannot read")
            return
        timeline = self._timeline
        recording = timeline._recording(timeline._events())  # (the running task's lane, or the thread's track)
        task = current_task() if _get_running_loop() is not None else None
        with self._lock:
            self._open[key] = (recording, task or threading.current_thread())
            if len(self._open) <= MAX_OPEN_SPANS:
                return
            self._open.popitem(last=False)
        self._timeline._refuse(f"an OpenTelemetry span still open past the {MAX_OPEN_SPANS} a SpanProcessor keeps")

    def _on_ending(self, span: Any) -> None:
        """(The SDK's hook before ``on_end``, while the span may still change: nothing to do.)"""

    def on_end(self, span: Any) -> None:
        """The span ended (in any thread or task): recorded as it ended, on the track it began on."""
        try:
            context = span.get_span_context()
            key = (context.trace_id, context.span_id)
        except Exception:
            return  # (its start was not read either, or is let go with the others never ended)
        with self._lock:
            started = self._open.pop(key, None)
        if started is None:
            return
        recording, owner = started
        if isinstance(owner, Task):
            ended = owner.done() or owner.get_loop().is_closed()
        else:  # (the main thread does not say it is alive at exit)
            ended = owner is not threading.current_thread() and not thread_alive(owner)
        if ended:  # its track is gone, or a lane that another task may have taken since: none to draw the span on
            self._timeline._refuse("an OpenTelemetry span that ended after the task or thread that started it")
            return
        try:
            records = span_records(span)
        except Exception:
            self._timeline._refuse("an OpenTelemetry span this SpanProcessor cannot read")
            return
        sink, limit, wake_at, count_full = recording
        for record in records:
            held = len(sink)
            if held >= limit:
                count_full()
                continue
            sink.extend(record)
            if held == wake_at:
                _wake_flusher()

    def shutdown(self) -> None:
        """The provider shuts down: spans still open are never recorded (the timeline is the program's, left open)."""
        with self._lock:
            self._open.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Deliver what the timeline holds (``Timeline.flush``): True if all of it was, within the time given."""
        return self._timeline.flush(timeout_s=timeout_millis / 1000)


def span_records(span: Any) -> list[Record]:
    """A span as OpenTelemetry ended it, as ringtrace events, the OTLP receiver's way: the span, from its start to its
    end, with its attributes, ids, kind, status and links as args; then each of its events (the exception it ended
    by among them) as an instant with its attributes and the span's ids.

    Raises:
        ValueError: the span ends before it starts, or before the clock's origin (an odd ``start_time``).
    """
    context = span.get_span_context()
    trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    args = dict(span.attributes or {})
    args["trace_id"] = trace_id
    args["span_id"] = span_id
    parent = span.parent
    if parent is not None and parent.is_valid:
        args["parent_span_id"] = f"{parent.span_id:016x}"
    args["kind"] = span.kind.name.lower()
    status = span.status
    if status.status_code.name != "UNSET":
        args["status"] = status.status_code.name.lower()
        if status.description:
            args["status_message"] = status.description
    if span.links:
        args["links"] = [f"{link.context.trace_id:032x}/{link.context.span_id:016x}" for link in span.links]
    # OpenTelemetry's times are the wall clock's (time_ns); ringtrace's the monotonic one: the two differ by as much
    # at the span's start as now, to within the wall clock's steps.
    to_monotonic = _now() - time.time_ns()
    start, end = span.start_time + to_monotonic, span.end_time + to_monotonic
    if not 0 <= start <= end:
        raise ValueError(f"a span from {span.start_time} to {span.end_time} ns")
    records: list[Record] = [(SPAN, span.name, start, end, args)]
    for event in span.events:
        at = max(event.timestamp + to_monotonic, 0)
        event_args = dict(event.attributes or {})
        event_args["span_id"] = span_id
        event_args["trace_id"] = trace_id
        records.append((INSTANT, event.name, at, at, event_args))
    return records


#: Every processor: a forked child gets fresh ones of all (``_after_fork_in_child``).
_PROCESSORS: weakref.WeakSet[SpanProcessor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: a lock another thread of the parent held at the fork would never be released, and the spans
    open in the parent are the parent's to record."""
    for processor in list(_PROCESSORS):
        processor._lock = threading.Lock()
        processor._open = OrderedDict()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
