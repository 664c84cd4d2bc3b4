"""The OTLP receiver's pure parts: bodies to export requests, and requests to native records, on any input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from ringtrace.collector.ingest.otlp.answers import BadRequest
from ringtrace.collector.ingest.otlp.logs import priority_of
from ringtrace.collector.ingest.otlp.process_streams import FIRST_TRACK_ID, ProcessStream
from ringtrace.collector.ingest.otlp.resources import ProcessEvents, attributes_of
from ringtrace.collector.ingest.otlp.signals import SIGNALS, decode_request
from ringtrace.collector.ingest.otlp.trace_lanes import TraceLanes, TraceSpan
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frame_types import FRAME_HEADER, FrameType
from ringtrace.wire.frames import encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.stream_limits import Limits

property_test = settings(deadline=None, max_examples=200)
TRACES, LOGS, METRICS = SIGNALS


def encodes(records: dict[Any, list[Any]]) -> int:
    """Events the records of a mapping pack into (the encoder takes whatever the mapping makes)."""
    encoder = StreamEncoder()
    events = 0
    for i, records_of_lane in enumerate(records.values()):
        batch = encoder.encode(TrackInfo(i + 1, THREAD_TRACK, "t", 0), records_of_lane)
        events += batch.event_count
    return events


@property_test
@given(st.sampled_from(SIGNALS), st.binary(max_size=512))
def test_any_bytes_are_a_request_or_a_400(signal: Any, body: bytes) -> None:
    try:
        export = decode_request(signal, body, as_json=False)
    except BadRequest as exc:
        assert exc.status == 400 and signal.request.__name__ in str(exc)
        return
    for process in signal.by_process(export):
        assert process.rejected <= process.items
        encodes(process.records)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)


@property_test
@given(st.sampled_from(SIGNALS), json_values)
def test_any_json_is_a_request_or_a_400(signal: Any, value: Any) -> None:
    try:
        export = decode_request(signal, json.dumps(value).encode(), as_json=True)
    except BadRequest as exc:
        assert exc.status == 400
        return
    signal.by_process(export)


def test_otlp_json_ids_are_hex_and_others_are_refused() -> None:
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "0" * 32, "spanId": "zz" * 8}]}]}]}
    with pytest.raises(BadRequest, match="field 'spanId' must be hex"):
        decode_request(TRACES, json.dumps(body).encode(), as_json=True)
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "01" * 8
    export = decode_request(TRACES, json.dumps(body).encode(), as_json=True)
    assert export.resource_spans[0].scope_spans[0].spans[0].span_id == bytes([1] * 8)


def test_attribute_values_nested_past_the_limit_become_text() -> None:
    value = AnyValue(string_value="leaf")
    for _ in range(20):
        value = AnyValue(array_value=ArrayValue(values=[value]))
    wrapped = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=value)]))
    (shown,) = attributes_of([KeyValue(key="deep", value=wrapped)]).values()
    depth = 0
    while isinstance(shown, (list, dict)):
        shown = shown["k"] if isinstance(shown, dict) else shown[0]
        depth += 1
    assert depth == 8 and isinstance(shown, str) and "leaf" in shown


@pytest.mark.parametrize(
    ("number", "text", "priority"),
    [(1, "", "trace"), (2, "", "trace+"), (4, "", "trace+++"), (5, "", "debug"), (9, "", "info"), (13, "", "warning"),
     (17, "", "error"), (24, "", "fatal"), (0, "WARN", "warning"), (0, "Critical", "fatal"), (0, "", "info"),
     (99, "debug", "debug")],
)  # fmt: skip
def test_a_log_records_severity_maps_onto_the_nine_priorities(number: int, text: str, priority: str) -> None:
    assert priority_of(LogRecord(severity_number=number, severity_text=text)) == priority  # type: ignore[arg-type]


def test_a_log_record_without_any_time_is_refused_and_counted() -> None:
    export = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[LogRecord(), LogRecord(time_unix_nano=5)])])]
    )
    (process,) = LOGS.by_process(export)
    assert (process.items, process.rejected, len(process.messages)) == (2, 1, 1)
    assert "time_unix_nano" in process.why


@pytest.mark.parametrize(
    ("body", "said"), [("[]", "an array"), ('"x"', "a string"), ("5", "a number"), ("null", "null")]
)
def test_json_that_is_not_an_object_is_a_400_that_says_what_it_is(body: str, said: str) -> None:
    with pytest.raises(BadRequest, match=f"a JSON object, got {said}"):
        decode_request(TRACES, body.encode(), as_json=True)


def test_a_span_without_a_start_time_is_refused_saying_so() -> None:
    export = decode_request(TRACES, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}', True)
    (process,) = TRACES.by_process(export)
    assert (process.items, process.rejected) == (1, 1) and process.why == "span 'x': start_time_unix_nano is not set"


@st.composite
def traces(draw: st.DrawFn) -> list[TraceSpan]:
    """A trace's spans (each within its parent's time, or not), in any order."""
    spans: list[TraceSpan] = []
    for span_id in range(1, draw(st.integers(1, 40)) + 1):
        parent = draw(st.integers(0, span_id - 1))
        start = draw(st.integers(0, 60))
        spans.append(TraceSpan(b"t" * 16, span_id, parent, start, start + draw(st.integers(0, 40)), []))
    return draw(st.permutations(spans))


@property_test
@given(traces())
def test_a_lane_draws_a_span_only_under_its_ancestors_and_never_across_another(spans: list[TraceSpan]) -> None:
    lanes = TraceLanes()
    placed = {span.span_id: (lanes.place(span), span) for span in spans}
    parent_of = {span.span_id: span.parent_id for span in spans}
    for lane, span in placed.values():
        others = [other for key, other in placed.values() if key == lane and other is not span]
        holders = []
        for other in others:
            if other.start_ns < span.start_ns and span.end_ns < other.end_ns:
                holders.append(other)
            else:  # strictly apart, or strictly inside: never an end shared
                assert (
                    other.end_ns < span.start_ns
                    or span.end_ns < other.start_ns
                    or (span.start_ns < other.start_ns and other.end_ns < span.end_ns)
                )
        if holders:
            innermost, ancestor = max(holders, key=lambda s: s.start_ns).span_id, span.parent_id
            while ancestor not in (0, innermost):
                ancestor = parent_of[ancestor]
            assert ancestor == innermost


def test_past_its_lanes_a_process_forgets_its_least_recent_trace_and_ends_its_lanes() -> None:
    lanes = TraceLanes(max_lanes=2)
    first = lanes.place(TraceSpan(b"a" * 16, 1, 0, 0, 10, []))
    lanes.place(TraceSpan(b"b" * 16, 1, 0, 0, 10, []))
    assert lanes.take_retired() == []
    third = lanes.place(TraceSpan(b"c" * 16, 1, 0, 0, 10, []))
    assert lanes.take_retired() == [first] and third.name == f"trace {(b'c' * 4).hex()}"
    again = lanes.place(TraceSpan(b"a" * 16, 2, 0, 20, 30, []))  # a span of it later: the trace again, anew
    assert again.name == first.name and again != first


def test_a_streams_track_ids_start_again_past_the_last_32_bit_one() -> None:
    """A resource's stream takes a track id for every trace's lane and never reuses one while it can (track ids are
    32 bits on the wire): past the last it starts again at the first, not at an id every frame would be refused for.
    (Billions of traces to get there through the collector: the stream itself, told where its ids are.)"""
    stream = ProcessStream(None, 2**32 - 1)  # type: ignore[arg-type]  # (no connection: none is used)
    assert [stream.track((n, f"t{n}")).track_id for n in (1, 2, 3)] == [2**32 - 1, FIRST_TRACK_ID, FIRST_TRACK_ID + 1]


def lane_spans(count: int) -> ProcessEvents:
    """A request's ``count`` traces of one span each (no thread: each on a lane of its trace), each of its own name."""
    process = ProcessEvents("checkout", Hello(1, "host", "checkout", "i", "boot", 1, 2, "otlp"))
    for i in range(count):
        start = 10**15 + i * 1_000
        records = [SPAN, f"op {i}", start, start + 500, {"i": i}]
        process.trace_spans.append(TraceSpan((i + 1).to_bytes(16, "big"), i + 1, 0, start, start + 500, records))
    return process


def decoded_spans(frames: list[bytes]) -> dict[int, tuple[str, str]]:
    """Per span (its ``i``): its name and its track's, as a reader of the frames decodes them (each in its place)."""
    decoder = SessionDecoder(Limits(), live=False)
    decoder.receive_data(b"".join(frames))
    decoder.receive_data(b"")
    return {
        event.args["i"]: (event.name, event.track.name)
        for frame in decoder
        if frame.TYPE == FrameType.EVENTS
        for event in decoder.tables.events(frame)  # type: ignore[arg-type]
    }


def test_the_lanes_of_a_requests_traces_are_declared_before_all_their_events_which_go_in_one_run() -> None:
    """300 traces of a span each: every lane's TRACK frame comes before all the EVENTS frames, which the collector
    stores as one run (not one a trace: most traces are a span or two of a service's); each span on its own lane."""
    stream = ProcessStream(None, FIRST_TRACK_ID)  # type: ignore[arg-type]  # (no connection: none is used)
    frames = stream.pack(lane_spans(300))
    types = [FRAME_HEADER.unpack_from(frame)[1] for frame in frames]
    runs = sum(1 for i, kind in enumerate(types) if kind == FrameType.EVENTS and types[i - 1] != FrameType.EVENTS)
    assert (runs, types.count(FrameType.EVENTS), types.count(FrameType.TRACK)) == (1, 300, 300)
    spans = decoded_spans([preamble(), encode(lane_spans(0).hello), *frames])
    assert spans == {i: (f"op {i}", f"trace {(i + 1).to_bytes(16, 'big').hex()[:8]}") for i in range(300)}


def test_where_the_string_table_starts_again_among_a_requests_lanes_each_span_keeps_its_name() -> None:
    """A table of 100 labels that starts again when full (as the collector's WELCOME allows): the EVENTS frames
    packed before it started again come before its new strings, so each decodes with its own name."""
    stream = ProcessStream(None, FIRST_TRACK_ID)  # type: ignore[arg-type]
    stream.encoder.strings.limit_to(100)
    stream.encoder.strings.recycles = True
    frames = stream.pack(lane_spans(300))
    spans = decoded_spans([preamble(), encode(lane_spans(0).hello), *frames])
    assert spans == {i: (f"op {i}", f"trace {(i + 1).to_bytes(16, 'big').hex()[:8]}") for i in range(300)}
