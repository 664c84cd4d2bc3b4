"""Compact records on the wire: a ``RecordRun`` (the C recorder's instants with flat arguments, in bytes) encodes to
the frames its flat records (``as_flat()``) encode to, packed in C from the records' bytes where the packer is built:
byte for byte the Python path's, and the C path's for the same events recorded as objects, whatever the string
table's limits and epochs.
"""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client.delivery.listeners import MemoryListener
from ringtrace.client.recording.messages import message_kind
from ringtrace.wire.call_records import event_count
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.event_packing import ACCELERATED
from ringtrace.wire.frame_types import MIN_MAX_FRAME_BYTES
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SPAN, THREAD_TRACK, DecodedEvent, TrackInfo
from ringtrace.wire.record_packing import RECORDS_ACCELERATED
from ringtrace.wire.record_runs import HEADER, RecordRun, pack_record
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder

HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.1.0")
TRACK = TrackInfo(3, THREAD_TRACK, "MainThread", 101)
LABELS = ["x", "tick", "é", "y" * 40]
#: A message's kind, in the process's registry (which the stream encoder declares and converts by).
MESSAGE = message_kind("wire", "warning", "gone $priority $category").id

needs_c = pytest.mark.skipif(not ACCELERATED, reason="the C packer is not in use in this process")


def frames_of(batches: list[EncodedBatch]) -> list[tuple[list[bytes], list[tuple[bytes, int]], int, int]]:
    return [(batch.control, batch.events, batch.dropped_events, batch.epoch) for batch in batches]


def counters(encoder: StreamEncoder) -> tuple[int, ...]:
    stats = encoder.stats(0, 0, 0)
    return encoder.strings.overflowed, encoder.strings.epoch, stats.label_overflow_events, stats.clipped_args


def run_of(
    events: list[tuple[int, int, int, int, dict[str, Any] | tuple[Any, ...] | None]], labels: list[str]
) -> RecordRun:
    return RecordRun(b"".join(pack_record(*event) for event in events), labels)


def decoded(encoder: StreamEncoder, batches: list[EncodedBatch]) -> list[DecodedEvent]:
    decoder = SessionDecoder(live=False)
    decoder.receive_data(preamble() + encode(HELLO) + b"".join(encoder.prefix()))
    list(decoder)
    events: list[DecodedEvent] = []
    for batch in batches:
        decoder.receive_data(b"".join(batch.control) + b"".join(frame for frame, _ in batch.events))
        events += [e for frame in decoder if isinstance(frame, Events) for e in decoder.tables.events(frame)]
    return events


def test_a_run_of_records_reads_back_as_the_instants_recorded() -> None:
    run = run_of([(INSTANT, 0, 100, 100, {"a": 1, "b": "s"}), (INSTANT, 2, 105, 105, None)], LABELS)
    assert len(run) == event_count(run) == 2
    assert run.as_flat() == [INSTANT, "x", 100, 100, {"a": 1, "b": "s"}, INSTANT, "é", 105, 105, None]
    encoder = StreamEncoder()
    events = decoded(StreamEncoder(), [encoder.encode(TRACK, run)])
    assert [(e.kind, e.name, e.ts_ns, e.dur_ns, e.args) for e in events] == [
        ("instant", "x", 100, 0, {"a": 1, "b": "s"}),
        ("instant", "é", 105, 0, None),
    ]


def test_message_records_read_back_as_the_messages_recorded_with_values_named_priority_and_category_kept() -> None:
    records = [(MESSAGE, 1, 100, 100, (7, "c")), (INSTANT, 0, 101, 101, None), (MESSAGE, 1, 102, 102, ())]
    run = run_of(records, LABELS)
    assert run.as_flat()[:5] == [MESSAGE, "tick", 100, 100, (7, "c")] and run.as_flat()[14] == ()
    for accelerated in (True, False) if ACCELERATED else (False,):
        encoder = StreamEncoder(accelerated=accelerated)
        events = decoded(StreamEncoder(), [encoder.encode(TRACK, run)])
        assert [(e.name, e.ts_ns, e.args) for e in events[:2]] == [
            ("gone priority(7) category(c)", 100, {"priority": 7, "category": "c"}),
            ("x", 101, None),
        ]
        assert events[0].kind == events[2].kind != events[1].kind


def test_an_object_listener_gets_a_run_of_records_as_the_events_a_reader_decodes() -> None:
    run = run_of([(INSTANT, 1, 7, 7, {"f": 1.5, "n": None, "t": True}), (SPAN, 0, 8, 20, {"q": b"\x00"})], LABELS)
    listener = MemoryListener()
    listener.receive(TRACK, run)
    encoder = StreamEncoder()
    assert listener.events == decoded(StreamEncoder(), [encoder.encode(TRACK, run)])


# -- the C packer holds to the Python path ---------------------------------------------------------------------------

flat_st = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=40),
)
args_st = st.one_of(st.none(), st.dictionaries(st.text(min_size=1, max_size=12), flat_st, min_size=1, max_size=6))
event_st = st.one_of(
    st.tuples(
        st.sampled_from([INSTANT, SPAN]),
        st.integers(0, 63),  # label index (taken modulo the labels)
        st.integers(0, 2**62),  # start
        st.one_of(st.just(0), st.integers(0, 2**40)),  # duration
        args_st,
    ),
    st.tuples(st.just(MESSAGE), st.integers(0, 63), st.integers(0, 2**62), st.just(0), st.tuples(*[flat_st] * 2)),
    st.tuples(
        st.just(MESSAGE),
        st.integers(0, 63),
        st.integers(0, 2**62),
        st.just(0),
        st.lists(flat_st, max_size=8).map(tuple),
    ),
)


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@needs_c
@settings(deadline=None, max_examples=150)
@given(
    labels=st.lists(st.text(min_size=1, max_size=30).filter(_encodable), min_size=1, max_size=12, unique=True),
    runs=st.lists(st.lists(event_st, min_size=1, max_size=40), min_size=1, max_size=6),
    max_strings=st.sampled_from([2, 3, 5, 100_000]),
    recycles=st.booleans(),
    per_frame=st.sampled_from([1, 3, 8192]),
    frame_bytes=st.sampled_from([MIN_MAX_FRAME_BYTES, 1 << 20]),
    pieces=st.booleans(),
    data=st.data(),
)
def test_a_run_of_records_packs_in_c_to_the_bytes_its_flat_records_pack_to_in_python_and_as_objects_in_c(
    labels: list[str],
    runs: list[list[tuple[int, int, int, int, dict[str, Any] | tuple[Any, ...] | None]]],
    max_strings: int,
    recycles: bool,
    per_frame: int,
    frame_bytes: int,
    pieces: bool,
    data: st.DataObject,
) -> None:
    # The run in C from its records; its flat records in Python; the same flat records in C (today's objects path).
    encoders = [
        StreamEncoder(frame_bytes, per_frame, max_strings, accelerated=accelerated)
        for accelerated in (True, False, True)
    ]
    for encoder in encoders:
        encoder.strings.recycles = recycles
        encoder.strings.keeps_retired = True
    shared: list[str] = []  # the recorder's table: it grows between runs
    batches: list[list[EncodedBatch]] = [[], [], []]
    for number, events in enumerate(runs):
        shared.extend(labels[: len(shared) + 3][len(shared) :])
        records = [(k, i % len(shared), s, s + d if k == SPAN else s, a) for k, i, s, d, a in events]
        run = run_of(records, shared)
        if number == data.draw(st.integers(0, len(runs)), label="limited at run"):
            for encoder in encoders:  # a collector's WELCOME, between two runs
                encoder.strings.limit_to(max(2, max_strings // 2))
        for encoder, made, given_run in zip(encoders, batches, (run, run.as_flat(), run.as_flat()), strict=True):
            if pieces:
                made.extend(batch for batch, _ in encoder.encode_pieces(TRACK, given_run))
            else:
                made.append(encoder.encode(TRACK, given_run))
        assert frames_of(batches[0]) == frames_of(batches[1]) == frames_of(batches[2])
        assert counters(encoders[0]) == counters(encoders[1]) == counters(encoders[2])


@needs_c
def test_a_large_run_of_records_packs_in_c_as_flat_records_pack_in_c() -> None:
    events = [(INSTANT, i % 4, 1_000 * i, 1_000 * i, {"a": i, "b": "s" * (i % 9)}) for i in range(20_000)]
    run = run_of(events, LABELS)
    by_c, by_flat = StreamEncoder(), StreamEncoder()
    assert frames_of([by_c.encode(TRACK, run)]) == frames_of([by_flat.encode(TRACK, run.as_flat())])
    assert RECORDS_ACCELERATED


@needs_c
def test_a_frame_past_the_byte_limit_is_split_as_the_python_path_splits_it() -> None:
    run = run_of([(INSTANT, 0, i, i, {"text": "t" * 200}) for i in range(2_000)], LABELS)
    by_c = StreamEncoder(MIN_MAX_FRAME_BYTES, accelerated=True)
    by_python = StreamEncoder(MIN_MAX_FRAME_BYTES, accelerated=False)
    packed = by_c.encode(TRACK, run)
    assert len(packed.events) > 1 and all(len(frame) <= MIN_MAX_FRAME_BYTES for frame, _ in packed.events)
    assert frames_of([packed]) == frames_of([by_python.encode(TRACK, run.as_flat())])


@pytest.mark.parametrize("accelerated", [pytest.param(True, marks=needs_c), False])
@pytest.mark.parametrize(
    ("records", "message"),
    [
        (pack_record(INSTANT, 9, 1, 1, None), "label index 9"),
        (pack_record(INSTANT, 0, 1, 1, None)[:-1], "not a whole record"),
        (HEADER.pack(HEADER.size, INSTANT, 0, 1, 1) + b"\xc0", "a record of 28 bytes"),
        (HEADER.pack(HEADER.size + 5, INSTANT, 0, 1, 1) + b"\xc0", "a record of 33 bytes"),
    ],
    ids=["label", "cut", "no-args", "past-end"],
)
def test_records_that_are_not_whole_or_name_no_label_are_refused(
    accelerated: bool, records: bytes, message: str
) -> None:
    encoder = StreamEncoder(accelerated=accelerated)
    good = pack_record(INSTANT, 1, 5, 5, {"a": 1})
    with pytest.raises((ValueError, IndexError)) as raised:
        encoder.encode(TRACK, RecordRun(good + records, LABELS[:2], 2))
    if accelerated or "label" not in message:
        assert message in str(raised.value)
    with pytest.raises((ValueError, IndexError)):
        RecordRun(good + records, LABELS[:2]).as_flat()
    batch = encoder.encode(TRACK, RecordRun(good, LABELS))  # nothing half done: the next run is whole
    assert [(e.name, e.args) for e in decoded(encoder, [batch])] == [("tick", {"a": 1})]


@needs_c
def test_the_c_packer_checks_what_it_is_given() -> None:
    from ringtrace.wire import _packer

    names = array("q", [0])
    record = pack_record(INSTANT, 0, 1, 1, None)
    with pytest.raises(TypeError, match="records: bytes"):
        _packer.pack_records(bytearray(record), 0, 1, names, 9, 1, 1 << 20)
    with pytest.raises(ValueError, match="offset 30"):
        _packer.pack_records(record, 1 + len(record), 1, names, 9, 1, 1 << 20)
    with pytest.raises(TypeError, match="array of int64"):
        _packer.pack_records(record, 0, 1, array("i", [0]), 9, 1, 1 << 20)
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        _packer.pack_records(record, 0, 1, names, 9, 2**32, 1 << 20)
    with pytest.raises(OverflowError, match="before 0"):
        _packer.pack_records(pack_record(INSTANT, 0, -1, -1, None), 0, 1, names, 9, 1, 1 << 20)
    frame, count, end, overflowed = _packer.pack_records(record + record, 0, 1, names, 0, 1, 1 << 20)
    assert (count, end, overflowed) == (1, len(record), 1) and frame is not None
    assert _packer.pack_records(record, 0, 1, array("q", [-1]), 9, 1, 1 << 20) == [0]
