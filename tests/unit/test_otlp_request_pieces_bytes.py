"""A large OTLP request cut into pieces (``request_pieces.py``), written as protobuf allows but as SDKs do not write
it: fields in any order, a message field given twice (protobuf merges the two), unknown fields at every level. Its
pieces read one after the other are read as the whole request is, every item in exactly one piece."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from ringtrace.collector.ingest.otlp.request_pieces import plan
from ringtrace.collector.ingest.otlp.signals import SIGNALS, decoded_by_process
from test_otlp_fast_spans import comparable, spans
from test_otlp_request_pieces import merged

TRACES = SIGNALS[0]


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def entry(field: int, body: bytes) -> bytes:
    return key(field, 2) + varint(len(body)) + body


unknown = st.one_of(
    st.tuples(st.integers(4, 50), st.integers(0, 2**64 - 1)).map(lambda f: key(f[0], 0) + varint(f[1])),
    st.tuples(st.integers(4, 50), st.binary(min_size=8, max_size=8)).map(lambda f: key(f[0], 1) + f[1]),
    st.tuples(st.integers(4, 50), st.binary(min_size=4, max_size=4)).map(lambda f: key(f[0], 5) + f[1]),
    st.tuples(st.integers(4, 50), st.binary(max_size=5)).map(lambda f: entry(f[0], f[1])),
)
names = st.sampled_from(["a", "b"])
resource_parts = st.lists(
    st.one_of(
        names.map(lambda n: [KeyValue(key="service.name", value=AnyValue(string_value=n))]),
        st.just([KeyValue(key="process.pid", value=AnyValue(int_value=7))]),
        st.just([KeyValue(key="host.name", value=AnyValue(string_value="h"))]),
    ).map(lambda attributes: entry(1, Resource(attributes=attributes).SerializeToString())),
    max_size=3,
)  # (a resource given in parts, merged as protobuf merges them)
scope_parts = st.lists(
    st.sampled_from(["s", "t", ""]).map(lambda n: entry(1, InstrumentationScope(name=n).SerializeToString())),
    max_size=2,
)
span_entries = st.lists(spans().map(lambda span: entry(2, span.SerializeToString())), max_size=5)
schema = st.lists(st.sampled_from([b"", b"x", b"schema"]).map(lambda url: entry(3, url)), max_size=2)


@st.composite
def shuffled(draw: Any, *parts: Any) -> bytes:
    fields = [field for part in parts for field in draw(part)]
    fields += draw(st.lists(unknown, max_size=2))
    return b"".join(draw(st.permutations(fields)))


@st.composite
def requests(draw: Any) -> bytes:
    resources = []
    for _ in range(draw(st.integers(0, 3))):
        scopes = st.lists(shuffled(scope_parts, span_entries, schema).map(lambda scope: entry(2, scope)), max_size=3)
        resources.append(entry(1, draw(shuffled(resource_parts, scopes, schema))))
    return draw(shuffled(st.just(resources)))


@settings(deadline=None, max_examples=300)
@given(requests(), st.integers(1, 300))
def test_the_pieces_of_a_request_in_any_field_order_are_read_as_the_whole(body: bytes, piece_bytes: int) -> None:
    whole = [comparable(process) for process in decoded_by_process(TRACES, body, False, 1)]
    cut = plan(body)
    assert cut is not None
    pieces = list(cut.pieces(piece_bytes=piece_bytes))
    assert merged([decoded_by_process(TRACES, piece.body, False, 1) for piece in pieces]) == whole
    assert sum(piece.items for piece in pieces) == sum(process["items"] for process in whole)
