"""OTLP log records as messages: each one a message of its scope (the category) at the priority its severity maps to,
on its thread's track if its attributes name one, else on its process's ``logs`` track. Its text is its body as text
(``text_of_body``); its values are that text, the body, the severity text, the trace and span ids, and the
attributes."""

from __future__ import annotations

import base64
import json
from typing import Any, Final

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from ringtrace.collector.ingest.otlp.resources import (
    ProcessEvents,
    attributes_of,
    late_time,
    process_of,
    thread_of,
    value_of,
)
from ringtrace.wire.message_format import PRIORITIES

__all__ = ["LOG_FIELDS", "LOG_TEXT", "NO_BODY", "logs_by_process", "priority_of", "text_of_body"]

#: The fields of every log message kind, and its text: the body as text alone (not ``body(...)``).
LOG_FIELDS: Final = tuple((name, "any") for name in ("text", "body", "severity", "trace_id", "span_id", "attributes"))
LOG_TEXT: Final = "${text}"
#: The text of a record with neither a body nor a severity text.
NO_BODY: Final = "log record"
#: OTLP's severity numbers, 1 to 24 in six ranges of four (TRACE, DEBUG, INFO, WARN, ERROR, FATAL), as priorities:
#: each range's first number its priority, and TRACE2-4 the finer trace+ to trace+++.
_BY_SEVERITY: Final = (
    *("trace", "trace+", "trace++", "trace+++"),
    *("debug",) * 4,
    *("info",) * 4,
    *("warning",) * 4,
    *("error",) * 4,
    *("fatal",) * 4,
)
_BY_TEXT: Final = {"warn": "warning", "err": "error", "critical": "fatal", **{p: p for p in PRIORITIES}}


def priority_of(record: LogRecord) -> str:
    """The priority of ``record``: by its severity number, else its severity text, else ``info``."""
    number = record.severity_number
    if 1 <= number <= len(_BY_SEVERITY):
        return _BY_SEVERITY[number - 1]
    return _BY_TEXT.get(record.severity_text.strip().lower(), "info")


def text_of_body(record: LogRecord, body: Any) -> str:
    """What a log record is named by: its body, a string as it is and any other value as JSON (bytes as base64, as
    OTLP/JSON has them); with no body, its severity text, else ``NO_BODY``."""
    if type(body) is str:
        return body
    if record.body.WhichOneof("value") is None:
        return record.severity_text or NO_BODY
    return json.dumps(body, ensure_ascii=False, separators=(", ", ": "), default=_json_of)


def _json_of(value: object) -> str:
    return base64.b64encode(value).decode() if isinstance(value, bytes) else repr(value)


def logs_by_process(request: ExportLogsServiceRequest) -> list[ProcessEvents]:
    """The request's log records, per process (as messages: ``ProcessEvents.messages``)."""
    processes: dict[str, ProcessEvents] = {}
    for resource_logs in request.resource_logs:
        process = process_of(resource_logs.resource, processes)
        for scope_logs in resource_logs.scope_logs:
            category = scope_logs.scope.name or "log"
            for record in scope_logs.log_records:
                process.items += 1
                ts = record.time_unix_nano or record.observed_time_unix_nano
                if not ts:
                    process.reject("log record: neither time_unix_nano nor observed_time_unix_nano is set")
                    continue
                late = late_time(
                    "log record", **{"time_unix_nano" if record.time_unix_nano else "observed_time_unix_nano": ts}
                )
                if late is not None:
                    process.reject(late)
                    continue
                attributes = attributes_of(record.attributes)
                lane = thread_of(attributes) or "logs"
                body = value_of(record.body)
                values = (
                    text_of_body(record, body),
                    body,
                    record.severity_text,
                    record.trace_id.hex(),
                    record.span_id.hex(),
                    attributes,
                )
                process.messages.append((lane, category, priority_of(record), ts, values))
    return list(processes.values())
