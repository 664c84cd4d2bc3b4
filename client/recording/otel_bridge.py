"""The OpenTelemetry API's current span, when a program uses it: ringtrace's trace-aware spans join its trace.

Never imports OpenTelemetry: a process that has not imported ``opentelemetry.trace`` itself has no current span of
it, and the client keeps needing only msgpack. Whatever OpenTelemetry does (a broken SDK, a context from another
version), nothing it raises reaches the program: its span is then ignored.
"""

from __future__ import annotations

import sys
from typing import Final

from ringtrace.client.recording.traceparent import SpanContext

__all__ = ["OTEL_TRACE", "otel_context", "otel_current_span"]

#: The module of OpenTelemetry's API that holds its current span: none imported, none current.
OTEL_TRACE: Final = "opentelemetry.trace"


def otel_current_span() -> object | None:
    """OpenTelemetry's current span object (None: OpenTelemetry is not imported, or no span is current)."""
    trace = sys.modules.get(OTEL_TRACE)
    if trace is None:
        return None
    try:
        span = trace.get_current_span()
        return span if span.get_span_context().is_valid else None
    except Exception:
        return None


def otel_context(span: object) -> SpanContext | None:
    """The ids of an OpenTelemetry span (from ``otel_current_span``), as a ``SpanContext``."""
    try:
        context = span.get_span_context()  # type: ignore[attr-defined]
        state = context.trace_state.to_header() if context.trace_state else ""
        return SpanContext(f"{context.trace_id:032x}", f"{context.span_id:016x}", int(context.trace_flags), state)
    except Exception:
        return None
