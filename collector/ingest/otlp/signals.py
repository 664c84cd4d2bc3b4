"""The OTLP signals (``SIGNALS``: traces, logs, metrics: each one's path, request and response messages, and how its
data becomes events), and the decoding of an export request from its body (protobuf, or OTLP/JSON with hex ids)."""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Callable
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs_service
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics_service
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service
from ringtrace.collector.ingest.otlp.answers import BadRequest
from ringtrace.collector.ingest.otlp.data_points import metrics_by_process
from ringtrace.collector.ingest.otlp.fast_spans import fast_spans_by_process
from ringtrace.collector.ingest.otlp.logs import logs_by_process
from ringtrace.collector.ingest.otlp.request_shape import check_json_shape, check_shape
from ringtrace.collector.ingest.otlp.resources import MAX_SPAN_EVENTS, ProcessEvents
from ringtrace.collector.ingest.otlp.spans import spans_by_process

__all__ = ["SIGNALS", "Signal", "decode_request", "decoded_by_process", "read_quickly"]

#: OTLP/JSON ids are hex, where protobuf's JSON mapping expects base64.
_ID_FIELDS: Final = frozenset(("traceId", "spanId", "parentSpanId"))
_HEX: Final = re.compile(r"[0-9a-fA-F]*")


@dataclasses.dataclass(frozen=True)
class Signal:
    """One OTLP signal: its path, its request and response messages, and how its data becomes events."""

    path: str
    #: What its items are called (in answers and logs): spans, log records, data points.
    items: str
    request: type[Message]
    response: type[Message]
    partial: type[Message]
    #: The ``partial_success`` field that counts the items refused.
    rejected_field: str
    by_process: Callable[[Any], list[ProcessEvents]]


SIGNALS: Final = (
    Signal("/v1/traces", "spans", trace_service.ExportTraceServiceRequest, trace_service.ExportTraceServiceResponse,
           trace_service.ExportTracePartialSuccess, "rejected_spans", spans_by_process),
    Signal("/v1/logs", "log records", logs_service.ExportLogsServiceRequest, logs_service.ExportLogsServiceResponse,
           logs_service.ExportLogsPartialSuccess, "rejected_log_records", logs_by_process),
    Signal("/v1/metrics", "data points", metrics_service.ExportMetricsServiceRequest,
           metrics_service.ExportMetricsServiceResponse, metrics_service.ExportMetricsPartialSuccess,
           "rejected_data_points", metrics_by_process),
)  # fmt: skip


def decoded_by_process(
    signal: Signal, body: bytes, as_json: bool, max_span_events: int = MAX_SPAN_EVENTS
) -> list[ProcessEvents]:
    """The request's data per process, each span's first ``max_span_events`` events and links kept."""
    processes = read_quickly(signal, body, as_json, max_span_events)
    if processes is not None:
        return processes
    request = decode_request(signal, body, as_json)
    if signal.by_process is spans_by_process:
        return spans_by_process(request, max_span_events)
    return signal.by_process(request)


def read_quickly(
    signal: Signal, body: bytes, as_json: bool, max_span_events: int = MAX_SPAN_EVENTS
) -> list[ProcessEvents] | None:
    """The request's data per process as ``decoded_by_process`` makes it, where the C reader of spans takes it; else
    None (the Python way's to read, or to refuse).

    Raises:
        BadRequest: the request holds more resources, scopes or items than it may (``request_shape.py``).
    """
    if as_json:
        return None
    check_shape(body, signal.items)  # (before the C reader, which holds the GIL as it goes)
    return fast_spans_by_process(body, max_span_events) if signal.by_process is spans_by_process else None


def decode_request(signal: Signal, body: bytes, as_json: bool) -> Any:
    """The ``signal``'s export request in ``body`` (protobuf, or OTLP/JSON with hex ids).

    Raises:
        BadRequest: it is not one.
    """
    export = signal.request()
    try:
        if as_json:
            value = _json(body)
            if not isinstance(value, dict):
                raise BadRequest(400, f"not an {signal.request.__name__}: a JSON object, got {_json_type(value)}")
            check_json_shape(value, signal.items)
            json_format.ParseDict(_ids_as_base64(value), export, ignore_unknown_fields=True)
        else:
            export.ParseFromString(body)
    except (DecodeError, json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise BadRequest(400, f"not an {signal.request.__name__}: {str(exc)[:200]}") from None
    return export


def _json(body: bytes) -> Any:
    import orjson  # (the collector's JSON library)

    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"not JSON: {exc}") from None


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _ids_as_base64(value: Any) -> Any:
    """OTLP/JSON's hex trace and span ids as the base64 protobuf's JSON mapping reads."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in _ID_FIELDS and isinstance(item, str):
                if len(item) % 2 or not _HEX.fullmatch(item):
                    raise BadRequest(400, f"field {key!r} must be hex, got {item[:40]!r}")
                item = base64.b64encode(bytes.fromhex(item)).decode()
            else:
                item = _ids_as_base64(item)
            out[key] = item
        return out
    if isinstance(value, list):
        return [_ids_as_base64(item) for item in value]
    return value
