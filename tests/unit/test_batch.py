"""BatchEncoder: records in, STRINGS and EVENTS frames out, whatever the records hold."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client.batch import BatchEncoder, EncodedBatch
from ringtrace.client.model import INSTANT, MAX_STRING_CHARS, OVERFLOW_LABEL, SPAN, StringTable
from ringtrace.client.protocol import (
    MIN_MAX_FRAME_BYTES,
    Events,
    Frame,
    FrameReader,
    Hello,
    Strings,
    decode_events,
    encode,
    preamble,
)

HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.1.0")
LIMIT = MIN_MAX_FRAME_BYTES

Record = tuple[int, Any, int, int, Any]


def flat(records: Iterable[Record]) -> list[Any]:
    """Records as a thread buffer holds them: their values back to back."""
    return [value for record in records for value in record]


class Encoder(BatchEncoder):
    """BatchEncoder fed records as tuples, flattened as Timeline.drain() hands them over."""

    def encode(self, source_id: int, records: Iterable[Record]) -> EncodedBatch:  # type: ignore[override]
        return super().encode(source_id, flat(records))


# -- helpers -------------------------------------------------------------------------------------------------------


def record(i: int, label: object = "op", pad: int = 0, **args: Any) -> Record:
    """The ``i``-th record of a batch: a 10 ns span, with ``pad`` bytes of argument if asked."""
    if pad:
        args["pad"] = "x" * pad
    return (SPAN, label, 1_000 + 100 * i, 1_010 + 100 * i, args)


def read_frames(frames: Iterable[bytes]) -> list[Frame]:
    reader = FrameReader("client")
    reader.receive_data(preamble() + encode(HELLO) + b"".join(frames))
    reader.receive_data(b"")
    first, *rest = reader
    assert first == HELLO
    return rest


def event_frames(batch: EncodedBatch) -> list[Events]:
    frames = read_frames(frame for frame, _ in batch.events)
    assert all(isinstance(frame, Events) for frame in frames)
    assert [frame.count for frame in frames] == [count for _, count in batch.events]  # type: ignore[union-attr]
    return frames  # type: ignore[return-value]


def strings_frames(batch: EncodedBatch) -> list[Strings]:
    frames = read_frames(batch.strings)
    assert all(isinstance(frame, Strings) for frame in frames)
    return frames  # type: ignore[return-value]


def decoded(table: StringTable, batch: EncodedBatch) -> list[Record]:
    """The events of a batch as ``(kind, label, start, end, args)``, labels looked up in ``table``."""
    return [
        (kind, table.strings[name_id], ts, ts + dur, args)
        for frame in event_frames(batch)
        for kind, name_id, ts, dur, args in decode_events(frame.payload, frame.count, frame.first_ts_ns)
    ]


def counts(batch: EncodedBatch) -> list[int]:
    return [count for _, count in batch.events]


def frame_size(records: list[Record]) -> int:
    """The size of the single EVENTS frame ``records`` pack into with no limit in the way."""
    ((frame, _),) = (
        Encoder(StringTable(), max_frame_bytes=1 << 30, max_events_per_frame=10**6).encode(1, records).events
    )
    return len(frame)


class Opaque:
    def __str__(self) -> str:
        return "<opaque>"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


# -- splitting -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "per_frame", "expected"),
    [(10, 3, [3, 3, 3, 1]), (9, 3, [3, 3, 3]), (1, 3, [1]), (5, 1, [1] * 5), (0, 3, [])],
)
def test_splits_by_max_events_per_frame(n: int, per_frame: int, expected: list[int]) -> None:
    table = StringTable()
    records = [record(i, label=f"op{i % 4}") for i in range(n)]
    batch = Encoder(table, max_events_per_frame=per_frame).encode(7, records)
    assert counts(batch) == expected
    assert all(frame.source_id == 7 for frame in event_frames(batch))
    assert decoded(table, batch) == records
    assert batch.dropped_events == 0


def test_events_header_spans_the_frame() -> None:
    records = [(SPAN, "a", 500, 900, {}), (INSTANT, "b", 300, 300, {}), (SPAN, "c", 400, 1_200, {})]
    (frame,) = event_frames(Encoder(StringTable()).encode(1, records))
    assert (frame.count, frame.first_ts_ns, frame.last_ts_ns) == (3, 300, 1_200)


def test_oversize_batch_is_split_into_halves() -> None:
    table = StringTable()
    records = [record(i, pad=6_000) for i in range(8)]
    limit = max(frame_size(records[:4]), frame_size(records[4:]))
    assert frame_size(records) > limit
    batch = Encoder(table, max_frame_bytes=limit).encode(1, records)
    assert counts(batch) == [4, 4]
    assert decoded(table, batch) == records


@settings(deadline=None, max_examples=50)
@given(pads=st.lists(st.integers(0, 12_000), min_size=1, max_size=30), data=st.data())
def test_split_batch_keeps_every_event_within_the_limit(pads: list[int], data: st.DataObject) -> None:
    records = [record(i, pad=pad) for i, pad in enumerate(pads)]
    smallest_possible = max(frame_size([r]) for r in records)
    limit = data.draw(st.integers(max(smallest_possible, LIMIT), max(frame_size(records), LIMIT)))
    table = StringTable()
    batch = Encoder(table, max_frame_bytes=limit).encode(1, records)
    assert all(len(frame) <= limit for frame, _ in batch.events)
    assert decoded(table, batch) == records
    assert batch.dropped_events == 0


def test_event_larger_than_a_frame_is_dropped_and_counted() -> None:
    table = StringTable()
    small = [record(0), record(2, pad=100), record(4)]
    huge = [record(1, pad=LIMIT), record(3, pad=2 * LIMIT)]
    batch = Encoder(table, max_frame_bytes=LIMIT).encode(1, [small[0], huge[0], small[1], huge[1], small[2]])
    assert batch.dropped_events == 2
    assert decoded(table, batch) == small
    assert all(len(frame) <= LIMIT for frame, _ in batch.events)


def test_batch_of_one_oversize_event_sends_no_events_frame() -> None:
    batch = Encoder(StringTable(), max_frame_bytes=LIMIT).encode(1, [record(0, pad=LIMIT)])
    assert (batch.events, batch.dropped_events) == ([], 1)


def test_resplit_fits_a_frame_packed_under_a_larger_limit() -> None:
    table = StringTable()
    records = [record(i, pad=3_000) for i in range(40)]
    encoder = Encoder(table)
    ((big, _),) = encoder.encode(1, records).events
    assert len(big) > LIMIT
    encoder.max_frame_bytes = LIMIT
    batch = encoder.resplit(big)
    assert len(batch.events) > 1
    assert all(len(frame) <= LIMIT for frame, _ in batch.events)
    assert decoded(table, batch) == records


# -- hostile labels and arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "label", [["a", "b"], {"k": 1}, {1, 2}, bytearray(b"ab")], ids=lambda label: type(label).__name__
)
def test_unhashable_label_becomes_its_text(label: object) -> None:
    table = StringTable()
    records = [record(0, "before"), record(1, label), record(2, "after")]
    batch = Encoder(table).encode(1, records)
    assert [event[1] for event in decoded(table, batch)] == ["before", str(label), "after"]


@pytest.mark.parametrize(
    ("value", "sent_as"),
    [
        pytest.param(2**64, str(2**64), id="int-over-64-bits"),
        pytest.param(-(2**70), str(-(2**70)), id="int-under-64-bits"),
        pytest.param(Opaque(), "<opaque>", id="object"),
        pytest.param(Unprintable(), "<unprintable Unprintable>", id="unprintable-object"),
        pytest.param({3}, [3], id="set"),
        pytest.param(frozenset({"f"}), ["f"], id="frozenset"),
        pytest.param([1, 2**80], [1, str(2**80)], id="nested-big-int"),
    ],
)
def test_unpackable_argument_is_cleaned_and_the_batch_survives(value: object, sent_as: object) -> None:
    table = StringTable()
    records = [record(0, n=1), record(1, bad=value, ok="yes"), record(2, n=2)]
    events = decoded(table, Encoder(table).encode(1, records))
    assert [event[4] for event in events] == [{"n": 1}, {"bad": sent_as, "ok": "yes"}, {"n": 2}]


def test_argument_with_a_lone_surrogate_does_not_lose_the_batch() -> None:
    table = StringTable()
    records = [record(0, n=1), record(1, bad="\ud800"), record(2, n=2)]
    events = decoded(table, Encoder(table).encode(1, records))
    assert [events[0][4], events[2][4]] == [{"n": 1}, {"n": 2}]


def test_label_with_a_lone_surrogate_does_not_lose_the_batch() -> None:
    table = StringTable()
    records = [record(0, "good"), record(1, "bad\udc80"), record(2, "good")]
    batch = Encoder(table).encode(1, records)
    assert [event[1] for event in decoded(table, batch)][::2] == ["good", "good"]


# -- the string table ----------------------------------------------------------------------------------------------


def test_strings_frames_carry_each_new_label_once() -> None:
    table = StringTable()
    encoder = Encoder(table)
    labels_per_batch = [["a", "b", "a"], ["b", "c", "c"], ["a", "b", "c"], ["d"]]
    sent = [
        strings_frames(encoder.encode(1, [record(i, label) for i, label in enumerate(labels)]))
        for labels in labels_per_batch
    ]
    assert sent == [[Strings(0, ("a", "b"))], [Strings(2, ("c",))], [], [Strings(3, ("d",))]]


def test_strings_frames_split_a_long_run_within_the_limit() -> None:
    table = StringTable()
    labels = [f"{i:05d}" + "\N{GRINNING FACE}" * (MAX_STRING_CHARS - 5) for i in range(60)]
    batch = Encoder(table, max_frame_bytes=LIMIT).encode(1, [record(i, label) for i, label in enumerate(labels)])
    frames = strings_frames(batch)
    assert len(frames) > 1
    assert all(len(frame) <= LIMIT for frame in batch.strings)
    assert [s for frame in frames for s in frame.strings] == labels
    assert [frame.first_id for frame in frames] == [0, *accumulate(len(frame.strings) for frame in frames[:-1])]


def test_string_table_overflow_maps_new_labels_to_one_overflow_label() -> None:
    table = StringTable(max_strings=3)
    ids = [table[label] for label in ["l0", "l1", "l2", "l3", "l4", "l0", "l5"]]
    assert ids == [0, 1, 2, 3, 3, 0, 3]
    assert table.strings == ["l0", "l1", "l2", OVERFLOW_LABEL]
    assert table.overflowed == 3


def test_string_table_overflow_through_the_encoder() -> None:
    table = StringTable(max_strings=2)
    labels = ["a", "b", "c", 4, "a", "e"]
    batch = Encoder(table).encode(1, [record(i, label) for i, label in enumerate(labels)])
    assert [event[1] for event in decoded(table, batch)] == ["a", "b", *[OVERFLOW_LABEL] * 2, "a", OVERFLOW_LABEL]
    assert strings_frames(batch) == [Strings(0, ("a", "b", OVERFLOW_LABEL))]
    assert table.overflowed == 3


def test_string_table_overflow_is_counted_once_on_the_slow_path() -> None:
    table = StringTable(max_strings=2)
    labels = ["a", "b", "c", "a", ["e"]]
    Encoder(table).encode(1, [record(i, label) for i, label in enumerate(labels)])
    assert table.overflowed == 2


def test_string_table_overflow_counts_str_and_other_labels_alike() -> None:
    def overflowed(label: object) -> int:
        table = StringTable(max_strings=1)
        for lookup in ["first", label, label, label]:
            table[lookup]
        return table.overflowed

    assert overflowed("label") == overflowed(12345)


@pytest.mark.parametrize(
    "label",
    [
        pytest.param("x" * 5_000, id="str"),
        pytest.param("x" * MAX_STRING_CHARS + "y", id="str-one-over"),
        pytest.param(["x" * 3_000], id="unhashable"),
        pytest.param(10**3000, id="huge-int"),
    ],
)
def test_long_labels_are_cut(label: object) -> None:
    table = StringTable()
    batch = Encoder(table).encode(1, [record(0, label)])
    (sent,) = strings_frames(batch)
    (text,) = sent.strings
    assert len(text) == MAX_STRING_CHARS
    assert str(label).startswith(text)
    assert decoded(table, batch)[0][1] == text


def test_labels_cut_to_the_same_text_share_an_id() -> None:
    table = StringTable()
    base = "y" * MAX_STRING_CHARS
    assert table[base + "1"] == table[base + "2"] == table[base] == 0
    assert table.strings == [base]


def test_label_of_exactly_the_limit_is_kept_whole() -> None:
    table = StringTable()
    label = "z" * MAX_STRING_CHARS
    assert table.strings[table[label]] == label
