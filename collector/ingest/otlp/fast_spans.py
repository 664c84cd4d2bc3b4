"""OTLP spans read straight from a request's protobuf bytes, in C (``_spans.c``), where it is built.

The C reader makes each span's records (its slice and its events' instants), ids and parent, as
``spans.py``'s ``_add_span`` does, without a protobuf object per span or field; what is left here is the part per
resource and the lane of each span. It reads the common shapes only: for a request with anything else (an attribute
whose value is an array or a map, a span the Python way refuses, bytes that are not protobuf), it gives None and
``spans.py`` reads the whole request, as it does wherever the C module is not built. What it skips (a span's
``trace_state``, a scope's version and attributes, a link's ``trace_state``, the ``schema_url``s) it checks as
protobuf does, and each resource is protobuf's to read: a body protobuf would refuse goes the Python way, and is
refused as before.
"""

from __future__ import annotations

from typing import Final

from google.protobuf.message import DecodeError
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from ringtrace.collector.ingest.otlp.resources import MAX_SPAN_EVENTS, ProcessEvents, process_of, thread_of
from ringtrace.collector.ingest.otlp.trace_lanes import TraceSpan
from ringtrace.wire.optional_c import load_optional

__all__ = ["ACCELERATED", "fast_spans_by_process"]

_spans = load_optional("ringtrace.collector.ingest.otlp._spans")
#: Whether the C reader is in use in this process.
ACCELERATED: Final = _spans is not None


def fast_spans_by_process(body: bytes, max_span_events: int = MAX_SPAN_EVENTS) -> list[ProcessEvents] | None:
    """The spans of the ``ExportTraceServiceRequest`` in ``body`` per process, as ``spans_by_process`` makes them
    (each span's first ``max_span_events`` events and links kept); None where the C reader is not built or leaves the
    request to the Python way."""
    if _spans is None:
        return None
    parsed = _spans.spans_of(body, max_span_events)
    if parsed is None:
        return None
    processes: dict[str, ProcessEvents] = {}
    for resource, spans, dropped in parsed:
        try:
            process = process_of(Resource.FromString(resource), processes)
        except DecodeError:  # (the Python way says why)
            return None
        process.items += len(spans)
        process.dropped += dropped
        trace_spans = process.trace_spans
        for records, trace_id, span_id, parent_id in spans:
            args = records[4]  # (the span's attributes, after its own keys: none of them names a thread)
            thread = thread_of(args) if "thread.id" in args else None
            if thread is not None:
                process.add(thread, *records)
            else:
                trace_spans.append(TraceSpan(trace_id, span_id, parent_id, records[2], records[3], records))
    return list(processes.values())
