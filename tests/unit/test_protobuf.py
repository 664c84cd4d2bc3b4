"""The protobuf wire encoder, read back by Google's protobuf library with Perfetto's definitions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from ringtrace.collector.export import protobuf

UINT64 = st.integers(0, 2**64 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(UINT64)
def test_unsigned_varints(value: int) -> None:
    assert pb.TrackEvent.FromString(protobuf.uint(11, value)).track_uuid == value  # uint64 track_uuid


@given(INT64)
def test_signed_varints_as_int64(value: int) -> None:
    assert pb.TrackEvent.FromString(protobuf.uint(30, value)).counter_value == value  # int64 counter_value


@given(st.integers(-(2**31), 2**31 - 1))
def test_int32(value: int) -> None:
    assert pb.ProcessDescriptor.FromString(protobuf.uint(1, value)).pid == value


@given(st.floats())
def test_doubles(value: float) -> None:
    decoded = pb.TrackEvent.FromString(protobuf.double(44, value)).double_counter_value
    assert decoded == value or (math.isnan(value) and math.isnan(decoded))


@given(st.text(), st.booleans(), UINT64)
def test_strings_booleans_and_messages(text: str, flag: bool, value: int) -> None:
    annotation = protobuf.string(10, text) + protobuf.boolean(2, flag)
    event = pb.TrackEvent.FromString(protobuf.message(4, annotation) + protobuf.uint(11, value))
    (decoded,) = event.debug_annotations
    assert (decoded.name, decoded.bool_value, event.track_uuid) == (text, flag, value)


def test_a_lone_surrogate_is_replaced_not_raised() -> None:
    assert pb.TrackEvent.FromString(protobuf.string(23, "a\ud800b")).name == "a?b"


def test_keys_and_the_limits_of_a_varint() -> None:
    assert protobuf.key(1, protobuf.LEN) == b"\x0a" and protobuf.key(60, protobuf.LEN) == b"\xe2\x03"
    assert protobuf.varint(2**64 - 1) == b"\xff" * 9 + b"\x01" and protobuf.varint(-1) == b"\xff" * 9 + b"\x01"
    for value in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match="at most 64 bits"):
            protobuf.varint(value)
