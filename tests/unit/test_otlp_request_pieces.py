"""A large OTLP request cut into pieces (``request_pieces.py``): each piece's data read as the whole request's would
be, in order, every item in exactly one piece; a body not of the shape cut is read whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from ringtrace.collector.ingest.otlp.request_pieces import PIECE_BYTES, plan
from ringtrace.collector.ingest.otlp.resources import ProcessEvents
from ringtrace.collector.ingest.otlp.signals import SIGNALS, decoded_by_process
from test_otlp_fast_spans import comparable, requests

TRACES, LOGS = SIGNALS[0], SIGNALS[1]


def merged(parts: list[list[ProcessEvents]]) -> list[dict[str, Any]]:
    """The processes of the pieces' data, each process's parts joined in the order of the pieces."""
    joined: dict[str, ProcessEvents] = {}
    for processes in parts:
        for process in processes:
            into = joined.setdefault(process.key, ProcessEvents(process.key, process.hello))
            for lane, records in process.records.items():
                into.records.setdefault(lane, []).extend(records)
            into.trace_spans += process.trace_spans
            into.messages += process.messages
            into.items += process.items
            into.rejected += process.rejected
            into.dropped += process.dropped
            into.why = into.why or process.why
    return [comparable(process) for process in joined.values()]


def read_in_pieces(signal: Any, body: bytes, piece_bytes: int) -> tuple[list[dict[str, Any]], list[int]]:
    cut = plan(body)
    assert cut is not None
    pieces = list(cut.pieces(piece_bytes=piece_bytes))
    parts = [decoded_by_process(signal, piece.body, False, 1) for piece in pieces]
    return merged(parts), [piece.items for piece in pieces]


@settings(deadline=None, max_examples=150)
@given(requests, st.integers(1, 400))
def test_the_pieces_of_a_request_are_read_as_the_whole_request(
    request: ExportTraceServiceRequest, piece_bytes: int
) -> None:
    body = request.SerializeToString()
    whole = [comparable(process) for process in decoded_by_process(TRACES, body, False, 1)]
    pieces, items = read_in_pieces(TRACES, body, piece_bytes)
    assert pieces == whole
    assert sum(items) == sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def test_each_piece_holds_items_of_about_its_bytes_and_every_resource_and_scope() -> None:
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="api"))])
    scopes = [
        ScopeLogs(
            scope=InstrumentationScope(name=f"scope{s}"),
            log_records=[LogRecord(time_unix_nano=1_000 + i, body=AnyValue(string_value=f"{s}-{i}")) for i in range(5)],
        )
        for s in range(3)
    ]
    request = ExportLogsServiceRequest(resource_logs=[ResourceLogs(resource=resource, scope_logs=scopes)])
    request.resource_logs.add()  # (a resource of no scope: in a piece all the same)
    body = request.SerializeToString()
    record = len(scopes[0].log_records[0].SerializeToString()) + 2
    whole = [comparable(process) for process in decoded_by_process(LOGS, body, False)]
    pieces, items = read_in_pieces(LOGS, body, 2 * record)
    assert pieces == whole
    assert items == [2, 2, 2, 2, 2, 2, 2, 1]  # (a piece goes on into the next scope)
    (shown,) = [process for process in whole if process["items"]]
    assert [message[4][0] for message in shown["messages"]] == [f"{s}-{i}" for s in range(3) for i in range(5)]


def test_a_body_not_of_the_shape_cut_is_read_whole() -> None:
    assert plan(b"\x0b") is None  # (a group)
    assert plan(b"\x08\x01") is None  # (its resource entries as a number)
    assert plan(b"\x0a\x05\x12\x01") is None  # (a length past the end)
    assert plan(b"") is not None


def test_a_large_resource_is_read_no_more_often_than_its_items_are_large() -> None:
    attributes = [KeyValue(key=f"host.label.{i}", value=AnyValue(string_value="x" * 40)) for i in range(6000)]
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="api")), *attributes])
    scope = ScopeLogs(
        scope=InstrumentationScope(name="app"),
        log_records=[LogRecord(time_unix_nano=1_000 + i, body=AnyValue(string_value=f"{i}")) for i in range(200_000)],
    )
    request = ExportLogsServiceRequest(resource_logs=[ResourceLogs(resource=resource, scope_logs=[scope])])
    body = request.SerializeToString()
    assert len(resource.SerializeToString()) > PIECE_BYTES
    cut = plan(body)
    assert cut is not None
    pieces = list(cut.pieces())
    assert len(pieces) > 1 and sum(piece.items for piece in pieces) == 200_000
    # (each piece a copy of the resource's 300 KB: 2.6 MB of records in pieces of 128 KiB read it 20 times)
    assert sum(len(piece.body) for piece in pieces) < 2 * len(body)
