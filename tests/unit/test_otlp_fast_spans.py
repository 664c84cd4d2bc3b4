"""The C reader of OTLP spans (``_spans.c``, through ``fast_spans.py``) against the Python way it is the twin of
(protobuf's decoding, then ``spans.py``): for any request it reads, the same processes with the same records."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from ringtrace.collector.ingest.otlp import fast_spans
from ringtrace.collector.ingest.otlp.answers import BadRequest
from ringtrace.collector.ingest.otlp.resources import MAX_TIME_NS, ProcessEvents
from ringtrace.collector.ingest.otlp.signals import SIGNALS, decode_request, decoded_by_process
from ringtrace.collector.ingest.otlp.spans import spans_by_process
from ringtrace.collector.read.frame_walk import MAX_WALL_NS

TRACES = SIGNALS[0]
property_test = settings(deadline=None, max_examples=150)
needs_c = pytest.mark.skipif(not fast_spans.ACCELERATED, reason="the C reader is not built (or pure Python is set)")

texts = st.text(max_size=12)
ids = st.sampled_from([b"", b"\0" * 8, b"\0" * 16]) | st.binary(min_size=8, max_size=8) | st.binary(max_size=17)
trace_ids = st.binary(min_size=16, max_size=16).filter(any)
span_ids = st.binary(min_size=8, max_size=8).filter(any)
any_values = st.one_of(
    texts.map(lambda t: AnyValue(string_value=t)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    texts.map(lambda t: AnyValue(string_value=t)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.floats(allow_nan=False).map(lambda f: AnyValue(double_value=f)),
    st.binary(max_size=6).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)
any_values = any_values | st.lists(any_values, max_size=3).map(lambda v: AnyValue(array_value=ArrayValue(values=v)))
keys = st.sampled_from(["thread.id", "thread.name", "trace_id", "span_id", "kind", "http.route", ""]) | texts
attributes = st.lists(st.builds(KeyValue, key=keys, value=any_values), max_size=4)
thread_attributes = st.just([]) | st.builds(
    lambda tid, name: [KeyValue(key="thread.id", value=AnyValue(int_value=tid)), *name],  # (tracks, or lanes)
    st.sampled_from([1, 2, -1, 2**63 - 1]),
    st.sampled_from([[], [KeyValue(key="thread.name", value=AnyValue(string_value="main"))]]),
)
times = st.sampled_from([0, 1, 10**18, 2**63 - 1, 2**63, 18 * 10**18]) | st.integers(0, 2**64 - 1)
events = st.builds(Span.Event, time_unix_nano=times, name=texts, attributes=attributes)
links = st.builds(Span.Link, trace_id=ids, span_id=ids, trace_state=texts, attributes=attributes)
statuses = st.builds(Status, code=st.sampled_from([0, 1, 2, 7, -3]), message=texts)


@st.composite
def spans(draw: Any) -> Span:
    valid = draw(st.integers(0, 9)) > 0  # (one in 10 has what the Python way refuses, perhaps: it reads the request)
    start = draw(st.sampled_from([1_000, 10**18, 2**63 - 1]) | st.integers(1, 2**63 - 1) if valid else times)
    end = draw(st.sampled_from([start, start + 500]) if valid else times)
    return Span(
        trace_id=draw(trace_ids if valid else ids),
        span_id=draw(span_ids if valid else ids),
        parent_span_id=draw(st.just(b"") | ids),
        name=draw(texts),
        kind=draw(st.sampled_from([0, 1, 2, 3, 4, 5, 9, -2])),
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=draw(attributes) + draw(thread_attributes),
        events=draw(st.lists(events, max_size=2)),
        links=draw(st.lists(links, max_size=2)),
        status=draw(statuses),
        trace_state=draw(texts),
        flags=draw(st.integers(0, 2**32 - 1)),
    )


resources = st.builds(
    lambda name, pid: Resource(
        attributes=[
            KeyValue(key="service.name", value=AnyValue(string_value=name)),
            *([KeyValue(key="process.pid", value=AnyValue(int_value=pid))] if pid else []),
        ]
    ),
    st.sampled_from(["a", "b"]),
    st.sampled_from([0, 7]),
)
scopes = st.builds(
    ScopeSpans,
    scope=st.builds(InstrumentationScope, name=texts, version=texts, attributes=attributes),
    spans=st.lists(spans(), max_size=4),
    schema_url=texts,
)
requests = st.builds(
    ExportTraceServiceRequest,
    resource_spans=st.lists(st.builds(ResourceSpans, resource=resources, scope_spans=st.lists(scopes, max_size=2)),
                            max_size=3),
)  # fmt: skip


def comparable(process: ProcessEvents) -> dict[str, Any]:
    """What a process holds, but its HELLO's clock readings (taken when it was made)."""
    hello = dataclasses.replace(process.hello, monotonic_ns=0, wall_ns=0)
    return {**dataclasses.asdict(process), "hello": hello}


def python_way(body: bytes) -> list[dict[str, Any]]:
    return [comparable(process) for process in spans_by_process(decode_request(TRACES, body, as_json=False))]


@needs_c
@property_test
@given(requests)
def test_the_c_reader_makes_what_the_python_way_makes(request: ExportTraceServiceRequest) -> None:
    body = request.SerializeToString()
    read = fast_spans.fast_spans_by_process(body)
    if read is not None:
        assert [comparable(process) for process in read] == python_way(body)


@needs_c
@property_test
@given(st.binary(max_size=300))
def test_any_bytes_the_c_reader_takes_are_read_as_protobuf_reads_them(body: bytes) -> None:
    read = fast_spans.fast_spans_by_process(body)
    if read is not None:
        assert [comparable(process) for process in read] == python_way(body)


@needs_c
def test_the_common_shapes_are_read_in_c() -> None:
    span = Span(
        trace_id=bytes(range(1, 17)),
        span_id=bytes(range(1, 9)),
        parent_span_id=bytes(range(2, 10)),
        name="GET /",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=1_000,
        end_time_unix_nano=2_000,
        attributes=[
            KeyValue(key="http.route", value=AnyValue(string_value="/")),
            KeyValue(key="thread.id", value=AnyValue(int_value=3)),
            KeyValue(key="ratio", value=AnyValue(double_value=0.5)),
        ],
        events=[Span.Event(time_unix_nano=1_500, name="exception")],
        links=[Span.Link(trace_id=bytes(16), span_id=bytes(8))],
        status=Status(code=Status.STATUS_CODE_ERROR, message="boom"),
    )
    lane = Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(3, 11)), name="work", start_time_unix_nano=1_100,
                end_time_unix_nano=1_200)  # fmt: skip
    scope = ScopeSpans(scope=InstrumentationScope(name="s"), spans=[span, lane])
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[scope])])
    body = request.SerializeToString()
    read = fast_spans.fast_spans_by_process(body)
    assert read is not None
    assert [comparable(process) for process in read] == python_way(body)
    (process,) = read
    assert process.items == 2 and list(process.records) == [(3, "thread 3")] and len(process.trace_spans) == 1


@needs_c
def test_a_request_of_other_shapes_is_the_python_ways() -> None:
    inner = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="x")]))
    listed = AnyValue(array_value=ArrayValue(values=[inner]))  # (an array of arrays: the Python way's)
    span = Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)), name="a", start_time_unix_nano=1,
                end_time_unix_nano=2, attributes=[KeyValue(key="list", value=listed)])  # fmt: skip
    refused = Span(trace_id=bytes(16), span_id=bytes(range(1, 9)), name="b", start_time_unix_nano=1)
    late = Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)), name="c", start_time_unix_nano=1,
                end_time_unix_nano=2**63)  # fmt: skip
    late_event = Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)), name="d", start_time_unix_nano=1,
                      end_time_unix_nano=2, events=[Span.Event(name="e", time_unix_nano=2**63)])  # fmt: skip
    for odd in (span, refused, late, late_event):
        body = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[odd])])]
        ).SerializeToString()
        assert fast_spans.fast_spans_by_process(body) is None
        assert [comparable(process) for process in decoded_by_process(TRACES, body, False)] == python_way(body)


@needs_c
@pytest.mark.parametrize("where", ["span", "scope", "link"])
def test_a_body_protobuf_refuses_is_refused(where: str) -> None:
    """A text the C reader skips (a span's trace_state, a scope's version, a link's) that is not UTF-8: protobuf
    refuses the body, and so it is the Python way's (a 400)."""
    not_utf8 = bytes([3 << 3 | 2, 1, 0xFF])  # (field 3, or field 2 of a scope, length 1)
    span = Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)), name="a", start_time_unix_nano=1,
                end_time_unix_nano=2)  # fmt: skip
    span_bytes = span.SerializeToString()
    scope_bytes = InstrumentationScope(name="s").SerializeToString()
    if where == "span":
        span_bytes += not_utf8
    elif where == "scope":
        scope_bytes += bytes([2 << 3 | 2, 1, 0xFF])
    else:
        link = Span.Link(trace_id=bytes(16), span_id=bytes(8)).SerializeToString() + not_utf8
        span_bytes += bytes([13 << 3 | 2, len(link)]) + link
    scope_spans = bytes([1 << 3 | 2, len(scope_bytes)]) + scope_bytes
    scope_spans += bytes([2 << 3 | 2, len(span_bytes)]) + span_bytes
    resource_spans = bytes([2 << 3 | 2, len(scope_spans)]) + scope_spans
    body = bytes([1 << 3 | 2, len(resource_spans)]) + resource_spans
    assert fast_spans.fast_spans_by_process(body) is None
    with pytest.raises(BadRequest, match=r"(?i)utf-8"):
        decode_request(TRACES, body, as_json=False)
    fixed = body.replace(b"\xff", b"x")  # (the same body, its text UTF-8: read in C)
    assert fast_spans.fast_spans_by_process(fixed) is not None


def test_the_latest_otlp_time_taken_is_the_latest_the_store_reads_as_wall_clock() -> None:
    assert MAX_TIME_NS == MAX_WALL_NS


@needs_c
@property_test
@given(requests, st.integers(0, 2))
def test_the_c_reader_keeps_the_events_and_links_the_python_way_keeps(
    request: ExportTraceServiceRequest, limit: int
) -> None:
    body = request.SerializeToString()
    read = fast_spans.fast_spans_by_process(body, limit)
    if read is not None:
        made = spans_by_process(decode_request(TRACES, body, as_json=False), limit)
        assert [comparable(process) for process in read] == [comparable(process) for process in made]


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_span_keeps_its_first_events_and_links_and_counts_the_others(way: str) -> None:
    if way == "c" and not fast_spans.ACCELERATED:
        pytest.skip("the C reader is not built (or pure Python is set)")
    span = Span(
        trace_id=bytes(range(1, 17)),
        span_id=bytes(range(1, 9)),
        name="a",
        start_time_unix_nano=1_000,
        end_time_unix_nano=2_000,
        events=[Span.Event(time_unix_nano=1_000 + i, name=f"e{i}") for i in range(5)],
        links=[Span.Link(trace_id=bytes([i + 1] * 16), span_id=bytes([i + 1] * 8)) for i in range(3)],
    )
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    ).SerializeToString()
    read = (
        fast_spans.fast_spans_by_process(body, 2)
        if way == "c"
        else spans_by_process(decode_request(TRACES, body, as_json=False), 2)
    )
    assert read is not None
    (process,) = read
    (placed,) = process.trace_spans
    assert placed.records[1::5] == ["a", "e0", "e1"]
    assert placed.records[4]["links"] == [f"{'01' * 16}/{'01' * 8}", f"{'02' * 16}/{'02' * 8}"]
    assert (process.items, process.rejected, process.dropped) == (1, 0, 3 + 1)
