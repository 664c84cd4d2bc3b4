"""StreamEncoder: drained records in, the frames of one stream out, read back by the session decoder.

Every test writes a stream the way a file listener does (preamble, HELLO, the encoder's prefix, then each batch's
control frames and EVENTS frames) and reads it with ``SessionDecoder(live=False)``, so what is checked is what a
reader of the stream sees, within the limits it enforces.
"""

from __future__ import annotations

import enum
import math
import weakref
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.wire.decoder import Limits, SessionDecoder
from ringtrace.wire.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    MIN_MAX_FRAME_BYTES,
    Events,
    Frame,
    Hello,
    Strings,
    Track,
    encode,
    preamble,
)
from ringtrace.wire.model import (
    CUT_MARK,
    INSTANT,
    MAX_ARG_DEPTH,
    MAX_ARG_ITEMS,
    MAX_STRING_CHARS,
    OVERFLOW_LABEL,
    SPAN,
    THREAD_TRACK,
    DecodedEvent,
    KindRegistry,
    RetiredStrings,
    StringTable,
    TrackInfo,
    display_text,
    normalise_args,
)
from ringtrace.wire.reader import FrameReader
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder

HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.1.0")
TRACK = TrackInfo(7, THREAD_TRACK, "main", 1234)
LIMIT = MIN_MAX_FRAME_BYTES
KIND_IDS = {"span": SPAN, "instant": INSTANT}
CLIPPED = "<ringtrace: clipped"

Record = tuple[int, Any, int, int, Any]


# -- helpers -------------------------------------------------------------------------------------------------------


def record(i: int, label: object = "op", pad: int = 0, **args: Any) -> Record:
    """The ``i``-th record of a run: a 10 ns span, with ``pad`` bytes of argument if asked."""
    if pad:
        args["pad"] = "x" * pad
    return (SPAN, label, 1_000 + 100 * i, 1_010 + 100 * i, args or None)


def flat(records: Iterable[Record]) -> list[Any]:
    """Records as a track buffer holds them, and ``Timeline.drain()`` hands them over: values back to back."""
    return [value for rec in records for value in rec]


class Stream:
    """One stream as a file listener writes it, read back as a file reader reads it."""

    def __init__(self, encoder: StreamEncoder | None = None, **options: Any) -> None:
        self.encoder = encoder if encoder is not None else StreamEncoder(**options)
        self.data = bytearray(preamble() + encode(HELLO) + b"".join(self.encoder.prefix()))

    def encode(self, records: Iterable[Record], track: TrackInfo = TRACK) -> EncodedBatch:
        batch = self.encoder.encode(track, flat(records))
        self.write(batch)
        return batch

    def write(self, batch: EncodedBatch) -> None:
        self.data += b"".join([*batch.control, *(frame for frame, _ in batch.events)])

    def events(self) -> list[DecodedEvent]:
        """Every event of the stream, each decoded as its frame arrives (as a file reader does)."""
        limits = Limits(
            max_frame_bytes=max(self.encoder.max_frame_bytes, DEFAULT_MAX_FRAME_BYTES),
            max_strings=self.encoder.strings.max_strings,
        )
        decoder = SessionDecoder(limits, live=False)
        decoder.receive_data(bytes(self.data))
        decoder.receive_data(b"")
        self.decoder = decoder
        events: list[DecodedEvent] = []
        for frame in decoder:
            if isinstance(frame, Events):
                events.extend(decoder.tables.events(frame))
        assert decoder.hello == HELLO
        return events

    def records(self) -> list[Record]:
        """The decoded events as records: ``(kind, name, start, end, args)``."""
        return [(KIND_IDS[e.kind], e.name, e.ts_ns, e.ts_ns + e.dur_ns, e.args) for e in self.events()]


def batch_frames(batch: EncodedBatch) -> list[Frame]:
    """The frames of one batch, read by the framing layer alone (the stream's rules are checked by ``Stream``)."""
    reader = FrameReader("client")
    reader.receive_data(preamble() + encode(HELLO) + b"".join([*batch.control, *(frame for frame, _ in batch.events)]))
    reader.receive_data(b"")
    first, *rest = reader
    assert first == HELLO
    return rest


def counts(batch: EncodedBatch) -> list[int]:
    return [count for _, count in batch.events]


def frame_size(records: list[Record]) -> int:
    """The size of the single EVENTS frame ``records`` pack into with no limit in the way."""
    unlimited = StreamEncoder(max_frame_bytes=1 << 30, max_events_per_frame=10**6)
    ((frame, _),) = unlimited.encode(TRACK, flat(records)).events
    return len(frame)


def names(stream: Stream) -> list[str]:
    return [event.name for event in stream.events()]


def args_of(stream: Stream) -> list[Any]:
    return [event.args for event in stream.events()]


def packed(value: object) -> bytes:
    """``value`` as msgpack bytes: equality that holds for NaN too."""
    data: bytes = msgpack.packb(value)
    return data


class Opaque:
    def __str__(self) -> str:
        return "<opaque>"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BadHash:
    def __hash__(self) -> int:
        raise RuntimeError("no hash for you")


class BadEq:
    """Hashes as ``"op"`` does, and refuses to be compared: a dict lookup of either meets ``__eq__``."""

    def __hash__(self) -> int:
        return hash("op")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparison for you")


class Colour(enum.IntEnum):
    RED = 1


class ResizedMap(dict[str, int]):
    """A map that another thread resizes while it is being read."""

    def items(self) -> Any:
        raise RuntimeError("dictionary changed size during iteration")


class BrokenList(list[int]):
    def __iter__(self) -> Any:
        raise RuntimeError("broken iterator")


def nested_dicts(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"k": value}
    return value


def nested_lists(depth: int) -> list[Any]:
    value: list[Any] = ["leaf"]
    for _ in range(depth):
        value = [value]
    return value


def depth_to_mark(value: Any) -> tuple[int, Any]:
    """How many maps and lists lead down to the first non-container, and that value."""
    depth = 0
    while isinstance(value, dict | list):
        value = value["k"] if isinstance(value, dict) else value[0]
        depth += 1
    return depth, value


# -- round trips ---------------------------------------------------------------------------------------------------


def test_round_trip_keeps_every_field() -> None:
    stream = Stream()
    records: list[Record] = [
        (SPAN, "load", 1_000, 1_500, {"path": "a.csv", "n": 3}),
        (INSTANT, "tick", 1_200, 1_200, None),
        (SPAN, "load", 900, 2_000, {"f": 1.5, "b": b"\x00", "t": True, "none": None}),
        (INSTANT, "done", 2_000, 2_000, {"big": 2**64 - 1, "small": -(2**63)}),
    ]
    batch = stream.encode(records)
    assert (batch.dropped_events, batch.event_count) == (0, 4)
    assert stream.records() == records
    assert {event.track for event in stream.events()} == {TRACK}
    assert stream.encoder.clipped_args == 0
    assert stream.encoder.label_overflow_events == 0


def test_each_track_is_declared_once_and_again_when_renamed() -> None:
    stream = Stream()
    first = stream.encode([record(0)])
    second = stream.encode([record(1)])
    renamed = TrackInfo(TRACK.track_id, TRACK.kind, "renamed", TRACK.thread_id)
    third = stream.encode([record(2)], renamed)
    assert [type(frame) for frame in batch_frames(first)] == [Track, Strings, Events]
    assert not [frame for frame in batch_frames(second) if isinstance(frame, Track)]
    (declared,) = [frame for frame in batch_frames(third) if isinstance(frame, Track)]
    assert (declared.track_id, declared.name) == (TRACK.track_id, "renamed")
    assert [event.track.name for event in stream.events()] == ["main", "main", "renamed"]


def test_an_empty_run_only_declares_its_track() -> None:
    stream = Stream()
    batch = stream.encode([])
    assert (batch.events, batch.dropped_events) == ([], 0)
    assert [type(frame) for frame in batch_frames(batch)] == [Track]


def test_tracks_of_one_stream_stay_apart() -> None:
    stream = Stream()
    other = TrackInfo(8, THREAD_TRACK, "worker", 99)
    stream.encode([record(0, "a")])
    stream.encode([record(1, "b")], other)
    stream.encode([record(2, "c")])
    assert [(event.name, event.track) for event in stream.events()] == [("a", TRACK), ("b", other), ("c", TRACK)]


# -- splitting -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "per_frame", "expected"),
    [(10, 3, [3, 3, 3, 1]), (9, 3, [3, 3, 3]), (1, 3, [1]), (5, 1, [1] * 5), (0, 3, [])],
)
def test_splits_by_max_events_per_frame(n: int, per_frame: int, expected: list[int]) -> None:
    stream = Stream(max_events_per_frame=per_frame)
    records = [record(i, label=f"op{i % 4}", n=i) for i in range(n)]
    batch = stream.encode(records)
    assert counts(batch) == expected
    assert stream.records() == records
    assert batch.dropped_events == 0


def test_events_header_spans_the_frame() -> None:
    stream = Stream()
    batch = stream.encode([(SPAN, "a", 500, 900, None), (INSTANT, "b", 300, 300, None), (SPAN, "c", 400, 1_200, None)])
    (frame,) = [frame for frame in batch_frames(batch) if isinstance(frame, Events)]
    assert (frame.count, frame.first_ts_ns, frame.last_ts_ns) == (3, 300, 1_200)


def test_oversize_run_is_split_into_halves() -> None:
    records = [record(i, pad=6_000) for i in range(8)]
    limit = max(frame_size(records[:4]), frame_size(records[4:]))
    assert frame_size(records) > limit
    stream = Stream(max_frame_bytes=limit)
    batch = stream.encode(records)
    assert counts(batch) == [4, 4]
    assert stream.records() == records


@settings(deadline=None, max_examples=40)
@given(pads=st.lists(st.integers(0, 12_000), min_size=1, max_size=30), data=st.data())
def test_split_run_keeps_every_event_within_the_limit(pads: list[int], data: st.DataObject) -> None:
    records = [record(i, pad=pad) for i, pad in enumerate(pads)]
    smallest_possible = max(frame_size([r]) for r in records)
    limit = data.draw(st.integers(max(smallest_possible, LIMIT), max(frame_size(records), LIMIT)))
    stream = Stream(max_frame_bytes=limit)
    batch = stream.encode(records)
    assert all(len(frame) <= limit for frame, _ in batch.events)
    assert stream.records() == records
    assert batch.dropped_events == 0


def test_event_larger_than_a_frame_is_dropped_and_counted_never_its_neighbours() -> None:
    stream = Stream(max_frame_bytes=LIMIT)
    small = [record(0), record(2, pad=100), record(4)]
    huge = [record(1, pad=LIMIT), record(3, pad=2 * LIMIT)]
    batch = stream.encode([small[0], huge[0], small[1], huge[1], small[2]])
    assert batch.dropped_events == 2
    assert batch.event_count == 3
    assert all(len(frame) <= LIMIT for frame, _ in batch.events)
    assert stream.records() == small
    after = stream.encode([record(5)])  # the stream goes on
    assert (after.dropped_events, stream.records()) == (0, [*small, record(5)])


def test_run_of_one_oversize_event_sends_no_events_frame() -> None:
    batch = StreamEncoder(max_frame_bytes=LIMIT).encode(TRACK, flat([record(0, pad=LIMIT)]))
    assert (batch.events, batch.dropped_events) == ([], 1)


def test_repack_fits_a_frame_packed_under_a_larger_limit_and_keeps_int_keyed_args() -> None:
    encoder = StreamEncoder()
    records = [record(i, by_status={200: i, 404: -i}, pad=64) for i in range(600)]
    ((big, count),) = encoder.encode(TRACK, flat(records)).events
    assert count == 600 and len(big) > LIMIT
    encoder.max_frame_bytes = LIMIT  # a WELCOME with the smallest limit arrived
    batch = encoder.repack(big)
    assert len(batch.events) > 1 and batch.dropped_events == 0
    assert all(len(frame) <= LIMIT for frame, _ in batch.events)
    stream = Stream(encoder)  # the prefix a new connection sends, then the repacked frames
    stream.write(batch)
    assert [args["by_status"] for args in args_of(stream)] == [{"200": i, "404": -i} for i in range(600)]
    assert [(r[0], r[2], r[3]) for r in stream.records()] == [(r[0], r[2], r[3]) for r in records]


# -- the string table ----------------------------------------------------------------------------------------------


def test_strings_frames_carry_each_new_label_once() -> None:
    stream = Stream()
    labels_per_run = [["a", "b", "a"], ["b", "c", "c"], ["a", "b", "c"], ["d"]]
    sent = []
    for labels in labels_per_run:
        batch = stream.encode([record(i, label) for i, label in enumerate(labels)])
        sent.append([frame for frame in batch_frames(batch) if isinstance(frame, Strings)])
    assert sent == [[Strings(0, ("a", "b"))], [Strings(2, ("c",))], [], [Strings(3, ("d",))]]
    assert names(stream) == [label for labels in labels_per_run for label in labels]


def test_strings_frames_split_a_long_run_within_the_limit() -> None:
    stream = Stream(max_frame_bytes=LIMIT)
    labels = [f"{i:05d}" + "\N{GRINNING FACE}" * (MAX_STRING_CHARS - 5) for i in range(60)]
    batch = stream.encode([record(i, label) for i, label in enumerate(labels)])
    frames = [frame for frame in batch_frames(batch) if isinstance(frame, Strings)]
    assert len(frames) > 1
    assert all(len(frame) <= LIMIT for frame in batch.control)
    assert [s for frame in frames for s in frame.strings] == labels
    assert [frame.first_id for frame in frames] == [0, *accumulate(len(frame.strings) for frame in frames[:-1])]
    assert names(stream) == labels


def test_string_table_overflow_maps_new_labels_to_the_reserved_last_id() -> None:
    table = StringTable(max_strings=4)
    ids = [table[label] for label in ["l0", "l1", "l2", "l3", "l4", "l0", 5]]
    assert ids == [0, 1, 2, 3, 3, 0, 3]
    assert table.overflow_id == 3
    assert table.strings == ["l0", "l1", "l2"]
    assert table.overflowed == 3
    assert table.take_new() == [(0, ["l0", "l1", "l2"]), (3, [OVERFLOW_LABEL])]
    assert table.take_new() == []  # the overflow label is sent once


def test_overflow_label_reaches_the_decoder_and_recording_goes_on() -> None:
    stream = Stream(max_strings=4)
    stream.encode([record(i, label) for i, label in enumerate(["a", "b", "c", "d", "a", 6])])
    assert names(stream) == ["a", "b", "c", OVERFLOW_LABEL, "a", OVERFLOW_LABEL]
    assert stream.decoder.tables.strings[3] == OVERFLOW_LABEL
    assert stream.encoder.label_overflow_events == 2
    later = stream.encode([record(10, "c"), record(11, "e"), record(12, "f"), record(13, "a")])
    assert later.dropped_events == 0
    assert names(stream)[6:] == ["c", OVERFLOW_LABEL, OVERFLOW_LABEL, "a"]
    assert stream.encoder.label_overflow_events == 4


def test_overflow_is_counted_once_when_a_label_takes_the_slow_path() -> None:
    stream = Stream(max_strings=3)
    stream.encode([record(i, label) for i, label in enumerate(["a", "b", "c", "a", ["e"]])])
    assert names(stream) == ["a", "b", OVERFLOW_LABEL, "a", OVERFLOW_LABEL]
    assert stream.encoder.label_overflow_events == 2


def test_limit_to_and_repack_clamp_ids_to_the_lower_limit() -> None:
    encoder = StreamEncoder(max_strings=100)
    labels = [f"l{i}" for i in range(10)]
    ((frame, _),) = encoder.encode(TRACK, flat(record(i, label, n=i) for i, label in enumerate(labels))).events
    assert encoder.strings.limit_to(5)  # a WELCOME with max_strings=5: ids 0..3 are strings, 4 the overflow label
    assert encoder.strings.strings == labels[:4]
    assert [encoder.strings.clamp(i) for i in (0, 3, 4, 9)] == [0, 3, 4, 4]
    batch = encoder.repack(frame)
    stream = Stream(encoder)  # a new stream's prefix: the cut table and the overflow label
    stream.write(batch)
    assert names(stream) == [*labels[:4], *[OVERFLOW_LABEL] * 6]  # the decoder's max_strings is 5
    assert [args["n"] for args in args_of(stream)] == list(range(10))
    assert encoder.label_overflow_events == 6
    assert encoder.strings["l2"] == 2 and encoder.strings["l7"] == 4  # later lookups agree


def test_repack_does_not_count_overflowed_events_twice() -> None:
    records = [record(i, label) for i, label in enumerate("abcde")]
    for lowered in (None, 3):
        encoder = StreamEncoder(max_strings=4)  # "d" and "e" overflow
        ((frame, _),) = encoder.encode(TRACK, flat(records)).events
        assert encoder.label_overflow_events == 2
        if lowered is None:  # only the frame size limit changed
            encoder.max_frame_bytes = LIMIT
        else:  # "c" is cut as well
            encoder.strings.limit_to(lowered)
        stream = Stream(encoder)
        stream.write(encoder.repack(frame))
        shown_as_overflow = names(stream).count(OVERFLOW_LABEL)
        assert shown_as_overflow == (2 if lowered is None else 3)
        assert encoder.label_overflow_events == shown_as_overflow


def test_limit_to_a_limit_not_lower_changes_nothing() -> None:
    table = StringTable(max_strings=10)
    table["a"]
    assert not table.limit_to(10) and not table.limit_to(1_000)
    assert (table.max_strings, table["a"]) == (10, 0)


@pytest.mark.parametrize(
    "label",
    [
        pytest.param("x" * 5_000, id="str"),
        pytest.param("x" * MAX_STRING_CHARS + "y", id="str-one-over"),
        pytest.param(["x" * 3_000], id="unhashable"),
        pytest.param(10**3000, id="huge-int"),
    ],
)
def test_long_labels_are_cut_ending_with_the_mark(label: object) -> None:
    stream = Stream()
    batch = stream.encode([record(0, "before"), record(1, label), record(2, "after")])
    sent = [s for frame in batch_frames(batch) if isinstance(frame, Strings) for s in frame.strings]
    text = sent[1]
    assert len(text) == MAX_STRING_CHARS
    assert text.endswith(CUT_MARK)
    assert str(label).startswith(text[: -len(CUT_MARK)])
    assert names(stream) == ["before", text, "after"]


def test_label_of_exactly_the_limit_is_kept_whole() -> None:
    table = StringTable()
    label = "z" * MAX_STRING_CHARS
    assert table.strings[table[label]] == label


def test_labels_cut_to_the_same_text_share_an_id() -> None:
    table = StringTable()
    base = "y" * (MAX_STRING_CHARS - 1)
    assert table[base + "12"] == table[base + "34"] == table[base + CUT_MARK] == 0
    assert table.strings == [base + CUT_MARK]


def test_string_table_does_not_grow_with_or_keep_alive_labels_that_share_a_text() -> None:
    table = StringTable(max_strings=100)
    for i in range(5_000):  # unbounded data behind a long prefix: one text
        assert table["p" * MAX_STRING_CHARS + str(i)] == 0
    for _ in range(5_000):  # NaN is not equal to itself: every one is a new key
        table[float("nan")]
    labels = [Opaque() for _ in range(100)]  # one text, a new object each time
    refs = [weakref.ref(label) for label in labels]
    assert {table[label] for label in labels} == {2}
    del labels
    assert all(ref() is None for ref in refs)
    assert table.strings == ["p" * (MAX_STRING_CHARS - 1) + CUT_MARK, "nan", "<opaque>"]
    assert len(table) <= 2 * len(table.strings)
    assert table.overflowed == 0


@pytest.mark.parametrize(
    ("label", "text"),
    [
        (["a", "b"], "['a', 'b']"),
        ({"k": 1}, "{'k': 1}"),
        ({1}, "{1}"),
        (bytearray(b"ab"), "bytearray(b'ab')"),
        (None, "None"),
        (3, "3"),
        (float("nan"), "nan"),
        (Unprintable(), "<unprintable Unprintable>"),
        ("bad\udc80", "bad\\udc80"),
        (Colour.RED, str(Colour.RED)),
    ],
    ids=lambda value: type(value).__name__,
)
def test_labels_of_any_type_become_their_text(label: object, text: str) -> None:
    stream = Stream()
    stream.encode([record(0, "before"), record(1, label), record(2, "after")])
    assert names(stream) == ["before", text, "after"]


@pytest.mark.parametrize("label", [BadHash(), BadEq()], ids=lambda value: type(value).__name__)
def test_labels_whose_hash_or_comparison_raises_cost_no_other_event(label: object) -> None:
    stream = Stream()
    batch = stream.encode([record(0, "op"), record(1, label), record(2, "op"), record(3, "after")])
    assert batch.dropped_events == 0
    assert names(stream) == ["op", display_text(label), "op", "after"]
    stream.encode([record(4, "op")])  # the table still works
    assert names(stream)[-1] == "op"


# -- argument values -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "sent_as"),
    [
        pytest.param({(2, 3): "y"}, {"(2, 3)": "y"}, id="tuple-key"),
        pytest.param({1: "a", None: "b"}, {"1": "a", "None": "b"}, id="int-and-none-keys"),
        pytest.param({"\udc80": 1}, {"\\udc80": 1}, id="surrogate-key"),
        pytest.param(2**64, str(2**64), id="int-over-64-bits"),
        pytest.param(-(2**70), str(-(2**70)), id="int-under-64-bits"),
        pytest.param([1, 2**80], [1, str(2**80)], id="nested-big-int"),
        pytest.param(2**64 - 1, 2**64 - 1, id="u64-max"),
        pytest.param(-(2**63), -(2**63), id="i64-min"),
        pytest.param({3}, [3], id="set"),
        pytest.param(frozenset({"f"}), ["f"], id="frozenset"),
        pytest.param((1, "two"), [1, "two"], id="tuple"),
        pytest.param(b"\x00\xff", b"\x00\xff", id="bytes"),
        pytest.param(bytearray(b"ab"), b"ab", id="bytearray"),
        pytest.param(Opaque(), "<opaque>", id="object"),
        pytest.param(Unprintable(), "<unprintable Unprintable>", id="unprintable-object"),
        pytest.param("a\ud800b", "a\\ud800b", id="lone-surrogate"),
        pytest.param(Colour.RED, str(Colour.RED), id="int-enum"),
        pytest.param(float("inf"), float("inf"), id="infinity"),
    ],
)
def test_any_argument_value_is_carried_and_costs_no_other_event(value: object, sent_as: object) -> None:
    stream = Stream()
    batch = stream.encode([record(0, n=1), record(1, bad=value, ok="yes"), record(2, n=2)])
    assert batch.dropped_events == 0
    assert args_of(stream) == [{"n": 1}, {"bad": sent_as, "ok": "yes"}, {"n": 2}]
    assert stream.encoder.clipped_args == 0


def test_int_too_long_for_text_is_carried_as_a_mark() -> None:
    stream = Stream()
    stream.encode([record(0, n=1), record(1, bad=10**5_000, nested=[10**5_000]), record(2, n=2)])
    assert args_of(stream) == [{"n": 1}, {"bad": "<unprintable int>", "nested": ["<unprintable int>"]}, {"n": 2}]


def test_nan_is_carried() -> None:
    stream = Stream()
    stream.encode([record(0, n=1), record(1, nan=float("nan"), nested=[float("nan")]), record(2, n=2)])
    first, middle, last = args_of(stream)
    assert math.isnan(middle["nan"]) and math.isnan(middle["nested"][0])
    assert (first, last) == ({"n": 1}, {"n": 2})


@pytest.mark.parametrize(
    "args",
    [
        pytest.param({"\udc80": 1, "ok": 2}, id="surrogate-key"),
        pytest.param({"big": 2**64, "ok": 2}, id="int-over-64-bits"),
    ],
)
def test_top_level_values_msgpack_refuses_are_normalised(args: dict[str, Any]) -> None:
    stream = Stream()
    stream.encode([record(0, n=1), (INSTANT, "odd", 1_050, 1_050, args), record(2, n=2)])
    assert args_of(stream) == [{"n": 1}, normalise_args(args)[0], {"n": 2}]


@pytest.mark.parametrize("nested", [nested_dicts(300), nested_lists(300)], ids=["maps", "lists"])
def test_deep_nesting_is_clipped_at_the_depth_limit_with_a_mark(nested: Any) -> None:
    stream = Stream()
    stream.encode([record(0, n=1), record(1, deep=nested), record(2, deep=nested), record(3, n=2)])
    first, middle, again, last = args_of(stream)
    depth, mark = depth_to_mark(middle["deep"])
    assert depth < MAX_ARG_DEPTH
    assert isinstance(mark, str) and mark.startswith(CLIPPED)
    assert again == middle
    assert (first, last) == ({"n": 1}, {"n": 2})
    assert stream.encoder.clipped_args == 2


def test_long_lists_and_maps_are_clipped_with_a_mark() -> None:
    stream = Stream()
    many = {f"k{i}": i for i in range(5_000)}
    stream.encode([record(0, n=1), record(1, items=list(range(5_000)), many=many, s=set(range(1_500))), record(2, n=2)])
    first, middle, last = args_of(stream)
    assert middle["items"][:MAX_ARG_ITEMS] == list(range(MAX_ARG_ITEMS))
    assert len(middle["items"]) == MAX_ARG_ITEMS + 1
    assert middle["items"][-1] == "<ringtrace: clipped 4000 more items>"
    assert len(middle["many"]) == MAX_ARG_ITEMS + 1
    assert middle["many"]["<ringtrace: clipped>"] == "4000 more items"
    assert len(middle["s"]) == MAX_ARG_ITEMS + 1 and middle["s"][-1].startswith(CLIPPED)
    assert (first, last) == ({"n": 1}, {"n": 2})
    assert stream.encoder.clipped_args == 3


@pytest.mark.parametrize("value", [ResizedMap(a=1), BrokenList([1, 2])], ids=["resized-map", "broken-list"])
def test_a_container_that_cannot_be_read_costs_only_its_own_args(value: object) -> None:
    stream = Stream()
    batch = stream.encode([record(0, n=1), record(1, "odd", bad=value, ok=1), record(2, n=2)])
    assert batch.dropped_events == 0
    first, middle, last = args_of(stream)
    assert names(stream) == ["op", "odd", "op"]
    assert middle["<ringtrace: clipped>"].startswith("arguments that could not be read")
    assert (first, last) == ({"n": 1}, {"n": 2})
    assert stream.encoder.clipped_args == 1


#: Any code point, lone surrogates included (and made likely).
_texts = st.text(st.characters(exclude_categories=()) | st.sampled_from("\ud800\udfff\x00\u2026"), max_size=12)
_keys = st.one_of(_texts, st.integers(), st.none(), st.booleans(), st.tuples(st.integers(), _texts))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**300) | st.integers(max_value=-(2**63) - 1, min_value=-(2**300)),
    st.floats(allow_nan=True, allow_infinity=True),
    _texts,
    st.binary(max_size=12),
    st.builds(Opaque),
    st.builds(Unprintable),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(_keys, children, max_size=4),
        st.sets(_keys, max_size=4),
        st.frozensets(st.integers(), max_size=4),
    ),
    max_leaves=25,
)


@settings(deadline=None, max_examples=150)
@given(
    runs=st.lists(
        st.tuples(st.one_of(_texts, _values), st.dictionaries(_texts, _values, max_size=4)), min_size=1, max_size=5
    )
)
def test_every_event_decodes_whatever_its_label_and_argument_values(runs: list[tuple[object, dict[str, Any]]]) -> None:
    stream = Stream()
    records: list[Record] = [record(0, "before", n=0)]
    for i, (label, args) in enumerate(runs, 1):
        records.append((INSTANT if i % 2 else SPAN, label, 1_000 + 100 * i, 1_000 + 110 * i, args or None))
    records.append(record(len(runs) + 1, "after", n=1))
    batch = stream.encode(records)
    assert batch.dropped_events == 0
    events = stream.events()
    assert len(events) == len(records)
    assert [e.name for e in events] == ["before", *(display_text(label) for label, _ in runs), "after"]
    assert (events[0].args, events[-1].args) == ({"n": 0}, {"n": 1})
    for event, (_, args) in zip(events[1:-1], runs, strict=True):
        assert packed(event.args) == packed(normalise_args(args)[0] if args else None)


def test_arguments_that_expand_through_shared_sublists_are_cut_at_a_total_budget() -> None:
    from ringtrace.wire.model import MAX_ARG_VALUES, normalise_args

    shared: list[Any] = ["leaf"]
    for _ in range(30):
        shared = [shared, shared]  # 2**30 leaves when expanded, a few dozen objects in memory
    value, clipped = normalise_args({"tree": shared})
    flat = str(value)
    assert f"more than {MAX_ARG_VALUES} values" in flat and clipped == 1
    assert flat.count("leaf") < MAX_ARG_VALUES


def test_a_large_flat_map_and_a_long_string_are_cut_with_a_mark_not_dropped() -> None:
    from ringtrace.wire.model import MAX_ARG_TEXT

    stream = Stream()
    big = {f"k{i}": i for i in range(5000)}
    batch = stream.encode([record(0, "big", **big), record(1, "long", v="y" * (MAX_ARG_TEXT + 10))])
    assert batch.dropped_events == 0 and stream.encoder.clipped_args == 2
    first, second = stream.events()
    assert len(first.args) == MAX_ARG_ITEMS + 1 and "<ringtrace: clipped>" in first.args
    assert second.args["v"].endswith("<ringtrace: clipped 10 characters>")


def test_labels_past_the_byte_limit_map_to_the_overflow_label_and_are_counted() -> None:
    table = StringTable(1_000)
    assert not table.limit_to(1_000, max_bytes=len(OVERFLOW_LABEL.encode()) + 30)  # room for three 10-byte labels
    ids = [table[f"label-{i:04d}"] for i in range(5)]
    assert ids == [0, 1, 2, table.overflow_id, table.overflow_id]
    assert (table.bytes, table.overflowed) == (30, 2)
    assert table["label-0001"] == 1  # a label that fits keeps its id


def test_a_lower_byte_limit_cuts_the_strings_past_it() -> None:
    table = StringTable(1_000)
    for i in range(10):
        table[f"label-{i:04d}"]
    assert table.limit_to(1_000, max_bytes=len(OVERFLOW_LABEL.encode()) + 45)  # four labels fit
    assert (table.max_strings, table.overflow_id, table.bytes) == (5, 4, 40)
    assert table.cut_ids == range(4, 10)
    assert table["label-0009"] == table.overflow_id and table["label-0003"] == 3


# -- a full table starts again (string epochs) ------------------------------------------------------------------


def recycling_stream(max_strings: int) -> Stream:
    stream = Stream(max_strings=max_strings)
    stream.encoder.strings.recycles = True
    return stream


def test_a_full_table_starts_again_and_labels_recorded_later_keep_their_names() -> None:
    stream = recycling_stream(max_strings=4)  # 3 labels an epoch, the last id the overflow label's
    stream.encode([record(i, label) for i, label in enumerate("abc")])
    later = stream.encode([record(10, "d"), record(11, "a"), record(12, "e")])
    assert names(stream) == ["a", "b", "c", "d", "a", "e"]
    assert stream.encoder.label_overflow_events == 0
    assert stream.encoder.strings.epoch == 1 and stream.encoder.strings.strings == ["d", "a", "e"]
    strings = [frame for frame in batch_frames(later) if isinstance(frame, Strings)]
    assert strings[0] == Strings(0, (), reset=True)  # ahead of the new epoch's strings
    assert [text for frame in strings for text in frame.strings] == ["d", "a", "e"]
    assert stream.decoder.tables.strings == {0: "d", 1: "a", 2: "e"}


def test_a_run_with_more_labels_than_an_epoch_holds_overflows_and_is_counted_once() -> None:
    stream = recycling_stream(max_strings=4)
    stream.encode([record(0, "a")])
    stream.encode([record(i, f"l{i}") for i in range(6)])  # fills the table: packed again in a new epoch
    assert names(stream) == ["a", "l0", "l1", "l2", *[OVERFLOW_LABEL] * 3]
    assert stream.encoder.label_overflow_events == 3
    assert stream.encoder.strings.epoch == 1
    stream.encode([record(10, "z")])  # the next run starts another epoch
    assert names(stream)[-1] == "z" and stream.encoder.label_overflow_events == 3


def test_a_table_that_does_not_recycle_overflows_as_before() -> None:
    stream = Stream(max_strings=4)
    stream.encode([record(i, label) for i, label in enumerate("abc")])
    stream.encode([record(10, "d"), record(11, "a")])
    assert names(stream) == ["a", "b", "c", OVERFLOW_LABEL, "a"]
    assert stream.encoder.strings.epoch == 0 and stream.encoder.label_overflow_events == 1


def test_a_run_of_more_new_labels_than_a_table_holds_is_encoded_in_pieces_that_each_fit() -> None:
    stream = recycling_stream(max_strings=10)  # 9 labels a table
    stream.encode([record(0, "first")])
    records = [record(i, f"l{i}") for i in range(30)]
    pieces = list(stream.encoder.encode_pieces(TRACK, flat(records)))
    assert [events for _, events in pieces] == [4] * 7 + [2]  # half a table's labels each
    for batch, _ in pieces:
        stream.write(batch)
    assert names(stream) == ["first", *(f"l{i}" for i in range(30))]
    assert stream.encoder.label_overflow_events == 0
    # A run the table has room for is one batch, as ``encode`` makes it.
    ((batch, events),) = stream.encoder.encode_pieces(TRACK, flat([record(40, "l29")]))
    assert events == 1 and len(batch.events) == 1


def test_a_byte_limit_starts_the_table_again_too() -> None:
    stream = recycling_stream(max_strings=1_000)
    stream.encoder.strings.limit_to(1_000, max_bytes=len(OVERFLOW_LABEL.encode()) + 30)  # three 10-byte labels
    for i in range(10):
        stream.encode([record(i, f"label-{i:04d}")])
    assert names(stream) == [f"label-{i:04d}" for i in range(10)]
    assert stream.encoder.strings.epoch == 3 and stream.encoder.label_overflow_events == 0


def test_a_frame_of_an_earlier_epoch_is_packed_again_in_the_current_one() -> None:
    encoder = StreamEncoder(max_strings=4)
    encoder.strings.recycles = encoder.strings.keeps_retired = True
    early = encoder.encode(TRACK, flat(record(i, label, n=i) for i, label in enumerate("abc")))
    encoder.encode(TRACK, flat([record(10, "d")]))  # starts epoch 1; "a", "b", "c" are gone from the table
    assert encoder.strings.epoch == 1 and early.epoch == 0
    assert list(encoder.strings.retired) == [0] and encoder.strings.labels_of(0, [2, 0, 3]) == ["c", "a", None]
    stream = Stream(encoder)  # a new connection's prefix: epoch 1's strings
    for frame, _ in early.events:
        stream.write(encoder.repack(frame, early.epoch))
    assert names(stream) == ["a", "b", "c"]  # epoch 1 held "d" and could not take all three: epoch 2 holds them
    assert [args["n"] for args in args_of(stream)] == [0, 1, 2]
    assert encoder.label_overflow_events == 0 and encoder.strings.epoch == 2
    encoder.strings.keep_epochs(())
    assert encoder.strings.retired == {}


def test_a_table_keeps_earlier_epochs_until_told_which_to_keep_compactly() -> None:
    encoder = StreamEncoder(max_strings=2)  # one label an epoch
    encoder.strings.recycles = encoder.strings.keeps_retired = True
    batches = [encoder.encode(TRACK, flat([record(i, f"label-{i}-é")])) for i in range(10)]
    assert [batch.epoch for batch in batches] == list(range(10))
    assert sorted(encoder.strings.retired) == list(range(9))
    encoder.strings.keep_epochs([2, 5])  # the epochs of the frames still queued
    assert sorted(encoder.strings.retired) == [2, 5]
    stream = Stream(encoder)
    for batch in (batches[2], batches[5], batches[6]):  # the last: of an epoch no longer kept
        for frame, _ in batch.events:
            stream.write(encoder.repack(frame, batch.epoch))
    assert names(stream) == ["label-2-é", "label-5-é", OVERFLOW_LABEL]
    assert encoder.label_overflow_events == 1  # lost, and counted
    retired = RetiredStrings(["", "ab", "", "é𝄞", "c"])
    assert [retired[i] for i in range(len(retired))] == ["", "ab", "", "é𝄞", "c"]


def test_a_stream_of_its_own_kinds_declares_those_and_converts_with_their_converters() -> None:
    registry = KindRegistry()
    kind = registry.register("Sample", "instant", (("id", "u64"), ("name", "str")), lambda v: ([v[0], v[1].upper()], 1))
    stream = Stream(StreamEncoder(registry=registry))
    stream.encode([(kind.id, "Sample", 5, 5, (7, "x"))])
    (event,) = stream.events()
    assert (event.kind, event.name, event.args) == ("Sample", "Sample", {"id": 7, "name": "X"})
    assert stream.decoder.tables.kinds[kind.id] == kind
    assert set(stream.decoder.tables.kinds) == {k.id for k in registry.since(0)}  # not the process's KINDS
    assert stream.encoder.clipped_args == 1
