"""OpenTelemetry's spans on ringtrace's tracks: a span processor for the OpenTelemetry SDK's ``TracerProvider``.

    from opentelemetry.sdk.trace import TracerProvider
    import ringtrace.client, ringtrace.client.otel

    tl = ringtrace.client.connect("127.0.0.1:7700", process_name="shop")
    provider = TracerProvider()
    provider.add_span_processor(ringtrace.client.otel.SpanProcessor(tl))

Each OpenTelemetry span the program starts is then also a ringtrace span: a ``Timeline.scope`` entered when it
starts and exited when it ends, on the track of the thread or asyncio task that started it, with its ids as args
(``trace_id``, ``span_id``, ``parent_span_id``, ``kind``, as a ``trace_scope``'s) and the attributes it started with.
The plain scopes the program records inside it are on the same track, within it: ``?trace_id=`` selects them with
it, which it cannot do for a span that reaches the collector only as OTLP (another process, as far as the collector
can tell).

Never imports OpenTelemetry: it has the methods the SDK calls on a span processor, and reads only what every SDK span
has (``get_span_context()``, ``parent``, ``kind``, ``name``, ``attributes``). Nothing raises into the program: a span
it cannot read, one still open when ``MAX_OPEN_SPANS`` others are, or one that ends after the task or thread that
started it (whose track then shows another task's work, or is gone), is not recorded, and counted as a dropped event
(warned about once).
"""

from __future__ import annotations

import os
import threading
import weakref
from asyncio import Task, current_task
from asyncio.events import _get_running_loop
from collections import OrderedDict
from typing import Any, Final

from ringtrace.client.recording.timelines import DEFAULT_TIMELINE, Timeline

__all__ = ["MAX_OPEN_SPANS", "SpanProcessor"]

#: Spans a processor keeps open at once, at most; past it the one open longest is let go (a span never ended).
MAX_OPEN_SPANS: Final = 100_000


class SpanProcessor:
    """Records each OpenTelemetry span as a ringtrace span of ``timeline`` (the process-wide one by default), on the
    track of the thread or task that starts it (see the module's docstring)."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        self._timeline = DEFAULT_TIMELINE if timeline is None else timeline
        #: The scope of each span open, and the task or thread that started it, by (trace id, span id).
        self._open: OrderedDict[tuple[int, int], tuple[Any, Task[Any] | threading.Thread]] = OrderedDict()
        self._lock = threading.Lock()
        _PROCESSORS.add(self)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """The span began, in the thread or task that records it: its scope is entered there."""
        try:
            context = span.get_span_context()
            key = (context.trace_id, context.span_id)
            args = dict(span.attributes or {})
            args["trace_id"] = f"{context.trace_id:032x}"
            args["span_id"] = f"{context.span_id:016x}"
            parent = span.parent
            if parent is not None and parent.is_valid:
                args["parent_span_id"] = f"{parent.span_id:016x}"
            args["kind"] = span.kind.name.lower()
            scope = self._timeline.scope(span.name, **args)
            scope.__enter__()
        except Exception:
            self._timeline._refuse("an OpenTelemetry span this SpanProcessor cannot read")
            return
        task = current_task() if _get_running_loop() is not None else None  # (where the scope records)
        with self._lock:
            self._open[key] = (scope, task or threading.current_thread())
            if len(self._open) <= MAX_OPEN_SPANS:
                return
            self._open.popitem(last=False)
        self._timeline._refuse(f"an OpenTelemetry span still open past the {MAX_OPEN_SPANS} a SpanProcessor keeps")

    def _on_ending(self, span: Any) -> None:
        """(The SDK's hook before ``on_end``, while the span may still change: nothing to do.)"""

    def on_end(self, span: Any) -> None:
        """The span ended (in any thread or task): its scope is exited, and so recorded on the track it began on."""
        try:
            context = span.get_span_context()
            key = (context.trace_id, context.span_id)
        except Exception:
            return  # (its start was not read either, or is let go with the others never ended)
        with self._lock:
            started = self._open.pop(key, None)
        if started is None:
            return
        scope, owner = started
        if isinstance(owner, Task):
            ended = owner.done() or owner.get_loop().is_closed()
        else:  # (the main thread does not say it is alive at exit)
            ended = owner is not threading.current_thread() and not owner.is_alive()
        if ended:  # its track is gone, or a lane that another task may have taken since: none to draw the span on
            self._timeline._refuse("an OpenTelemetry span that ended after the task or thread that started it")
            return
        scope.__exit__(None, None, None)

    def shutdown(self) -> None:
        """The provider shuts down: spans still open are never recorded (the timeline is the program's, left open)."""
        with self._lock:
            self._open.clear()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Deliver what the timeline holds (``Timeline.flush``): True if all of it was, within the time given."""
        return self._timeline.flush(timeout_s=timeout_millis / 1000)


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
