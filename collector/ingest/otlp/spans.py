"""OTLP spans as native events.

A span whose attributes name its thread (``thread.id``) is a slice on that thread's track, where spans nest as the
code that made them does. Any other span is a slice on a lane of its trace (``trace_lanes.py``): tracks of the trace
in its process, where a child nests under its parent and concurrent siblings go on lanes of their own, so a trace
takes as many rows as its spans nest deep and run at once. Span ids, trace id, kind, status, scope, links (and each
link's attributes, in ``link_attributes``, where one has any) and attributes are the slice's args; a span's events
are instants on its track.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from ringtrace.collector.ingest.otlp.resources import (
    MAX_SPAN_EVENTS,
    ProcessEvents,
    attributes_of,
    late_time,
    process_of,
    thread_of,
)
from ringtrace.collector.ingest.otlp.trace_lanes import TraceSpan
from ringtrace.wire.model import INSTANT, SPAN

__all__ = ["spans_by_process"]

_KINDS: Final = {value: name.removeprefix("SPAN_KIND_").lower() for name, value in Span.SpanKind.items()}
_STATUS: Final = {value: name.removeprefix("STATUS_CODE_").lower() for name, value in Status.StatusCode.items()}


def spans_by_process(request: ExportTraceServiceRequest, max_span_events: int = MAX_SPAN_EVENTS) -> list[ProcessEvents]:
    """The request's spans, per process (resources of one process merged), each span's first ``max_span_events``
    events and links kept, those past it counted in its process's ``dropped``."""
    processes: dict[str, ProcessEvents] = {}
    for resource_spans in request.resource_spans:
        process = process_of(resource_spans.resource, processes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                process.items += 1
                _add_span(process, span, scope, max_span_events)
    return list(processes.values())


def _add_span(process: ProcessEvents, span: Span, scope: str, limit: int) -> None:
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if not start:
        process.reject(f"span {span.name!r:.60}: start_time_unix_nano is not set")
        return
    if end < start:
        process.reject(f"span {span.name!r:.60}: end_time_unix_nano {end} before start_time_unix_nano {start}")
        return
    events, links = span.events[:limit], span.links[:limit]
    late = _late(span, events)
    if late is not None:
        process.reject(late)
        return
    if len(span.span_id) != 8 or len(span.trace_id) != 16:
        process.reject(f"span {span.name!r:.60}: trace_id must be 16 bytes and span_id 8")
        return
    for field, value in (("trace_id", span.trace_id), ("span_id", span.span_id)):
        if not any(value):  # (OTLP's "none": the parent of a trace's roots)
            process.reject(f"span {span.name!r:.60}: {field} is all zeros")
            return
    attributes = attributes_of(span.attributes)
    span_id = span.span_id.hex()
    args: dict[str, Any] = {"trace_id": span.trace_id.hex(), "span_id": span_id, "kind": _KINDS.get(span.kind, "")}
    if span.parent_span_id:
        args["parent_span_id"] = span.parent_span_id.hex()
    if span.status.code:
        args["status"] = _STATUS.get(span.status.code, str(span.status.code))
        if span.status.message:
            args["status_message"] = span.status.message
    if scope:
        args["scope"] = scope
    if span.links:
        args["links"] = [f"{link.trace_id.hex()}/{link.span_id.hex()}" for link in links]
        if any(link.attributes for link in links):  # (each link's, in the order of ``links``)
            args["link_attributes"] = [attributes_of(link.attributes) for link in links]
    args.update(attributes)
    trace_id = args["trace_id"]
    records: list[Any] = [SPAN, span.name, start, end, args]
    process.dropped += len(span.events) - len(events) + len(span.links) - len(links)
    for event in events:
        event_args = attributes_of(event.attributes)
        event_args["span_id"] = span_id
        event_args["trace_id"] = trace_id
        records += (INSTANT, event.name, event.time_unix_nano, event.time_unix_nano, event_args)
    thread = thread_of(attributes)
    if thread is not None:
        process.add(thread, *records)
        return
    parent_id = int.from_bytes(span.parent_span_id[:8], "big")
    ids = (span.trace_id, int.from_bytes(span.span_id, "big"), parent_id)
    process.trace_spans.append(TraceSpan(*ids, start, end, records))


def _late(span: Span, events: Sequence[Span.Event]) -> str | None:
    """Why the span is refused if its times or one of its ``events``' (those kept) are past what is stored
    (``MAX_TIME_NS``)."""
    what = f"span {span.name!r:.60}"
    late = late_time(what, start_time_unix_nano=span.start_time_unix_nano, end_time_unix_nano=span.end_time_unix_nano)
    for event in events:
        late = late or late_time(f"{what}: event {event.name!r:.60}", time_unix_nano=event.time_unix_nano)
    return late
