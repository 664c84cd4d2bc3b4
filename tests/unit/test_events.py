"""Typed events: class definitions checked when they are made, values checked on the flusher, schema on the wire."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ringtrace.client import (
    Event,
    InvalidField,
    MemoryListener,
    Timeline,
    binary,
    boolean,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    ptr,
    string,
    u8,
    u16,
    u32,
    u64,
)
from ringtrace.client.recording.events import event_id, wire_values
from ringtrace.wire.decoder import Limits, SessionDecoder
from ringtrace.wire.frames import Events, Hello, Schema, encode, preamble
from ringtrace.wire.model import FIRST_TYPED_KIND, KINDS, THREAD_TRACK, TrackInfo
from ringtrace.wire.reader import FrameReader
from ringtrace.wire.stream_encoder import StreamEncoder

TRACK = TrackInfo(5, THREAD_TRACK, "main", 1)


class Header(Event):
    version: u8
    flags: u16 = 0


class Packet(Event):
    size: u16
    proto: string
    header: Header
    ratio: f32 = 0.5
    ok: bool = True


class AllTypes(Event):
    a: i8
    b: i16
    c: i32
    d: i64
    e: u8
    f: u16
    g: u32
    h: u64
    i: f32
    j: f64
    k: string
    m: binary
    n: boolean
    p: ptr
    q: int
    r: float
    s: str
    t: bytes


def packet(**changes: Any) -> Packet:
    fields: dict[str, Any] = {"size": 1500, "proto": "udp", "header": Header(version=4)}
    return Packet(**{**fields, **changes})


# -- class definitions ---------------------------------------------------------------------------------------------


def test_a_class_gets_a_kind_with_typed_fields_after_the_event_id() -> None:
    assert Packet.kind.id >= FIRST_TYPED_KIND
    assert Packet.kind.name == "Packet" and Packet.kind.shape == "instant"
    assert Packet.kind.fields == (
        ("id", "u64"),
        ("size", "u16"),
        ("proto", "str"),
        ("header", f"kind:{Header.kind.id}"),
        ("ratio", "f32"),
        ("ok", "bool"),
    )
    codes = [code for _, code in AllTypes.kind.fields[1:]]
    expected = "i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 str bytes bool ptr i64 f64 str bytes"
    assert codes == expected.split(" ")


def test_init_is_keyword_only_with_defaults_and_repr_and_eq_follow_the_fields() -> None:
    event = Packet(size=1, proto="tcp", header=Header(version=6))
    assert (event.ratio, event.ok) == (0.5, True)
    assert repr(event) == "Packet(size=1, proto='tcp', header=Header(version=6, flags=0), ratio=0.5, ok=True)"
    assert event == Packet(size=1, proto="tcp", header=Header(version=6))
    with pytest.raises(TypeError):
        Packet(1, "tcp", Header(version=6))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="size"):
        Packet(proto="tcp", header=Header(version=6))  # type: ignore[call-arg]


def test_subclasses_extend_their_base_fields_base_first() -> None:
    class TcpPacket(Packet):
        port: u16 = 80

    assert TcpPacket.fields == ("size", "proto", "header", "ratio", "ok", "port")
    assert TcpPacket(size=1, proto="tcp", header=Header(version=4)).port == 80
    assert TcpPacket.kind.id != Packet.kind.id


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        ("list[int]", r"Bad\.x: list\[int\] is not a field type"),
        ("dict", r"Bad\.x: <class 'dict'> is not a field type"),
        ("NoSuchType", r"Bad: its field annotations cannot be resolved"),
    ],
)
def test_a_bad_field_type_raises_at_class_creation_naming_field_and_type(annotation: str, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        type("Bad", (Event,), {"__annotations__": {"x": annotation}, "__module__": __name__})


def test_a_default_that_does_not_fit_and_a_reserved_name_raise_at_class_creation() -> None:
    with pytest.raises(TypeError, match=r"Bad\.x: the default 300 is not a u8"):

        class Bad(Event):
            x: u8 = 300

    with pytest.raises(TypeError, match=r"Worse\.id: the name is every event's own"):

        class Worse(Event):
            id: u32


# -- values --------------------------------------------------------------------------------------------------------


BOUNDS = [
    (i8, -(2**7), 2**7 - 1),
    (i16, -(2**15), 2**15 - 1),
    (i32, -(2**31), 2**31 - 1),
    (i64, -(2**63), 2**63 - 1),
    (u8, 0, 2**8 - 1),
    (u16, 0, 2**16 - 1),
    (u32, 0, 2**32 - 1),
    (u64, 0, 2**64 - 1),
]


@pytest.mark.parametrize(("field_type", "low", "high"), BOUNDS)
def test_integers_fit_exactly_their_range(field_type: Any, low: int, high: int) -> None:
    One = type("One", (Event,), {"__annotations__": {"v": field_type}, "__module__": __name__})
    assert wire_values(One(v=low))[1:] == [low]
    assert wire_values(One(v=high))[1:] == [high]
    for outside in (low - 1, high + 1, "1", 1.0):
        with pytest.raises(InvalidField, match=r"One\.v: "):
            wire_values(One(v=outside))


@given(st.floats(allow_nan=False))
def test_f32_takes_what_a_float32_holds(value: float) -> None:
    One = type("F", (Event,), {"__annotations__": {"v": f32}, "__module__": __name__})
    if abs(value) <= 3.4028234663852886e38 or value in (float("inf"), float("-inf")):
        assert wire_values(One(v=value))[1:] == [value]
    else:
        with pytest.raises(InvalidField):
            wire_values(One(v=value))


def test_a_nested_value_that_does_not_fit_is_named_by_its_path() -> None:
    with pytest.raises(InvalidField, match=r"^Packet\.header\.version: 400 is not a u8"):
        wire_values(packet(header=Header(version=400)))
    with pytest.raises(InvalidField, match=r"^Packet\.header: 4 is not a Header"):
        wire_values(packet(header=4))


def test_long_text_is_clipped_with_a_mark_and_binary_is_bytes() -> None:
    values = wire_values(AllTypes(**dict.fromkeys("abcdefghpq", 1), i=1.0, j=2, k="x" * 70_000, m=bytearray(b"ab"),
                                   n=False, r=1.5, s="s", t=b"t"))  # fmt: skip
    assert values[11].startswith("x" * 65_536) and values[11].endswith("<ringtrace: clipped 4464 characters>")
    assert values[12] == b"ab" and values[10] == 2.0


# -- through a timeline and an encoder -----------------------------------------------------------------------------


def test_pushed_events_reach_an_object_listener_as_maps_with_ids() -> None:
    listener = MemoryListener()
    tl = Timeline("typed", [listener])
    tl.push(packet())
    tl.push(packet(size=70_000))  # does not fit a u16: dropped, counted
    tl.push(packet(proto="tcp"))
    tl.push("not an event")  # type: ignore[arg-type]
    assert not tl.flush()  # a drop since the last flush
    first, second = listener.events
    assert (first.kind, first.name, first.dur_ns) == ("Packet", "Packet", 0)
    assert first.args == {"id": first.args["id"], "size": 1500, "proto": "udp", "header": {"version": 4, "flags": 0},
                          "ratio": 0.5, "ok": True}  # fmt: skip
    assert second.args["proto"] == "tcp" and second.args["id"] > first.args["id"]
    assert listener.rejected_events == 1 and listener.dropped_events == 1
    tl.close()


def stream_frames(encoder: StreamEncoder, *batches: list[Any], limits: Limits | None = None) -> list[Any]:
    data = bytearray(preamble() + encode(Hello(1, "h", "p", "i", "b", 0, 0, "0")) + b"".join(encoder.prefix()))
    for records in batches:
        batch = encoder.encode(TRACK, records)
        data += b"".join([*batch.control, *(frame for frame, _ in batch.events)])
    decoder = SessionDecoder(limits or Limits(), live=False)
    decoder.receive_data(bytes(data))
    decoder.receive_data(b"")
    events = []
    for frame in decoder:
        if isinstance(frame, Events):
            events += list(decoder.tables.events(frame))
    return events


def test_the_encoder_declares_kinds_defined_after_its_stream_began() -> None:
    # Room for every kind of the process: other tests may have defined thousands, past the default max_kinds.
    room = len(KINDS) + 1
    encoder = StreamEncoder()
    encoder.max_kinds = room
    reader = FrameReader("client")
    reader.receive_data(preamble() + encode(Hello(1, "h", "p", "i", "b", 0, 0, "0")) + b"".join(encoder.prefix()))
    declared = {kind.id for frame in reader if isinstance(frame, Schema) for kind in frame.kinds}
    assert Packet.kind.id in declared

    class Later(Event):
        note: string

    later = Later(note="late")
    records = [Later.kind.id, "Later", 10, 10, later]
    (event,) = stream_frames(encoder, records, limits=Limits(max_kinds=room))
    assert (event.kind, event.args) == ("Later", {"id": event_id(later), "note": "late"})


def test_a_stream_limited_to_fewer_kinds_declares_only_those() -> None:
    encoder = StreamEncoder()
    encoder.max_kinds = 3
    reader = FrameReader("client")
    reader.receive_data(preamble() + encode(Hello(1, "h", "p", "i", "b", 0, 0, "0")) + b"".join(encoder.prefix()))
    assert sum(len(frame.kinds) for frame in reader if isinstance(frame, Schema)) == 3


def test_a_stream_limited_in_schema_bytes_declares_the_kinds_that_fit_and_warns_of_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    encoder = StreamEncoder()
    encoder.max_schema_bytes = sum(kind.text_bytes for kind in KINDS.since(0)[:5])
    reader = FrameReader("client")
    reader.receive_data(preamble() + encode(Hello(1, "h", "p", "i", "b", 0, 0, "0")) + b"".join(encoder.prefix()))
    declared = [kind for frame in reader if isinstance(frame, Schema) for kind in frame.kinds]
    assert declared[:5] == list(KINDS.since(0)[:5])
    assert sum(kind.text_bytes for kind in declared) <= encoder.max_schema_bytes
    withheld = len(KINDS.since(0)) - len(declared)
    assert withheld > 0
    assert len([r for r in caplog.records if "max_schema_bytes" in r.getMessage()]) == withheld
    # Later batches do not declare them either, nor warn again.
    caplog.clear()
    encoder.encode(TrackInfo(1, THREAD_TRACK, "t", 1), [])
    assert not [r for r in caplog.records if "max_schema_bytes" in r.getMessage()]


def test_rejected_events_are_counted_and_warned_once_per_class(caplog: pytest.LogCaptureFixture) -> None:
    encoder = StreamEncoder()
    records = [
        value for size in (1, 70_000, 2, 80_000) for value in (Packet.kind.id, "Packet", 10, 10, packet(size=size))
    ]
    events = stream_frames(encoder, records)
    assert [e.args["size"] for e in events] == [1, 2]
    assert encoder.rejected_events == 2
    assert len([r for r in caplog.records if "Packet.size" in r.getMessage()]) == 1


def test_an_event_keeps_one_id_for_every_listener_and_ids_are_unique() -> None:
    first, second = MemoryListener(), MemoryListener()
    tl = Timeline("ids", [first, second])
    events = [packet(size=size) for size in range(50)]
    for event in events:
        tl.push(event)
    assert tl.flush(timeout_s=30)
    ids = [e.args["id"] for e in first.events]
    assert ids == [e.args["id"] for e in second.events] == [event_id(e) for e in events]
    assert len(set(ids)) == 50
    tl.close()
