"""Traced calls on the wire: a ``CallRun`` encodes to the frames its flat records (``as_flat()``) encode to, packed in
C from the records' bytes where the packer is built (byte for byte the Python path's, whatever the tables' limits and
epochs), and readers show each call as a span named by its function, with its file and line.

Every stream here is read back by ``SessionDecoder(live=False)``, as a file listener's is.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringtrace.client.delivery.listeners import MemoryListener
from ringtrace.wire.call_packing import CALLS_ACCELERATED
from ringtrace.wire.call_records import RECORD, CallRun, event_count, pack_records
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.event_packing import ACCELERATED
from ringtrace.wire.frame_types import MIN_MAX_FRAME_BYTES
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.keyword_args import with_maps
from ringtrace.wire.model import CALL, CALL_RAISED, THREAD_TRACK, DecodedEvent, TrackInfo
from ringtrace.wire.stream_encoder import EncodedBatch, StreamEncoder

HELLO = Hello(1, "host", "proc", "instance", "boot", 0, 0, "0.1.0")
TRACK = TrackInfo(3, THREAD_TRACK, "MainThread", 101)
LOCATIONS = [("main", "app.py", 10), ("Parser.parse", "parse.py", 3), ("len", "", 0)]

LOCATION_0 = {"file": "app.py", "line": 10}

needs_c = pytest.mark.skipif(not ACCELERATED, reason="the C packer is not in use in this process")


class Stream:
    """An encoder's stream as a file holds it, read back as it grows."""

    def __init__(self, encoder: StreamEncoder) -> None:
        self.encoder = encoder
        self.decoder = SessionDecoder(live=False)
        self.decoder.receive_data(preamble() + encode(HELLO) + b"".join(encoder.prefix()))
        list(self.decoder)
        self.events: list[DecodedEvent] = []

    def write(self, batch: EncodedBatch) -> None:
        self.decoder.receive_data(b"".join(batch.control) + b"".join(frame for frame, _ in batch.events))
        for frame in self.decoder:
            if isinstance(frame, Events):
                self.events.extend(self.decoder.tables.events(frame))


def frames_of(batches: list[EncodedBatch]) -> list[tuple[list[bytes], list[tuple[bytes, int]], int, int]]:
    return [(batch.control, batch.events, batch.dropped_events, batch.epoch) for batch in batches]


def counters(encoder: StreamEncoder) -> tuple[int, ...]:
    table, stacks = encoder.strings, encoder.stacks
    stats = encoder.stats(0, 0, 0)
    loss = stats.label_overflow_events, stats.clipped_args
    return table.overflowed, table.epoch, stacks.overflowed, len(stacks), *loss


def test_a_run_of_calls_reads_back_as_spans_named_by_function_with_file_and_line() -> None:
    run = CallRun(pack_records([(105, 130, 1, CALL), (140, 150, 2, CALL), (100, 200, 0, CALL_RAISED)]), LOCATIONS)
    stream = Stream(StreamEncoder())
    stream.write(stream.encoder.encode(TRACK, run))
    assert [(e.kind, e.name, e.ts_ns, e.dur_ns, e.args) for e in stream.events] == [
        ("call", "Parser.parse", 105, 25, {"file": "parse.py", "line": 3}),
        ("call", "len", 140, 10, {"file": "", "line": 0}),
        ("call_raised", "main", 100, 100, {"file": "app.py", "line": 10}),
    ]
    assert stream.encoder.stacks.locations == [LOCATIONS[1], LOCATIONS[2], LOCATIONS[0]]  # one frame a location


def test_an_object_listener_gets_a_run_of_calls_as_the_events_a_reader_decodes() -> None:
    run = CallRun(pack_records([(105, 130, 1, CALL), (100, 200, 0, CALL_RAISED)]), LOCATIONS)
    listener = MemoryListener()
    listener.receive(TRACK, run)
    stream = Stream(StreamEncoder())
    stream.write(stream.encoder.encode(TRACK, run))
    assert listener.events == stream.events


def test_the_call_kinds_reach_a_reader_as_their_names_even_past_the_stack_table() -> None:
    encoder = StreamEncoder()
    encoder.stacks.limit_to(1, 1)  # a collector's lowest limits: one location's stack, then none
    stream = Stream(encoder)
    stream.write(encoder.encode(TRACK, CallRun(pack_records([(1, 2, 0, CALL), (3, 4, 1, CALL_RAISED)]), LOCATIONS)))
    assert [(e.kind, e.name, e.args) for e in stream.events] == [
        ("call", "main", {"file": "app.py", "line": 10}),
        ("call_raised", "Parser.parse", None),  # its stack did not fit: counted as clipped
    ]
    assert encoder.stats(0, 0, 0).clipped_args == 1


# -- the C packer holds to the Python path ---------------------------------------------------------------------------

location_st = st.tuples(
    st.sampled_from(["f", "g", "Parser.parse", "é", "<lambda>", "x" * 40, "len", "list.append"]),
    st.sampled_from(["app.py", "", "lib/élan.py"]),
    st.integers(0, 70_000),
)
call_st = st.tuples(
    st.integers(0, 2**62),  # start
    st.integers(0, 2**40),  # duration
    st.integers(0, 63),  # location index (taken modulo the locations)
    st.sampled_from([CALL, CALL_RAISED]),
)


@needs_c
@settings(deadline=None, max_examples=120)
@given(
    locations=st.lists(location_st, min_size=1, max_size=12),
    runs=st.lists(st.lists(call_st, max_size=40), min_size=1, max_size=6),
    max_strings=st.sampled_from([2, 3, 5, 100_000]),
    recycles=st.booleans(),
    stack_limits=st.sampled_from([None, (1, 1), (2, 3), (5, 2)]),
    per_frame=st.sampled_from([1, 3, 8192]),
    frame_bytes=st.sampled_from([MIN_MAX_FRAME_BYTES, 1 << 20]),
    pieces=st.booleans(),
    data=st.data(),
)
def test_a_run_of_calls_packs_in_c_to_the_bytes_its_flat_records_pack_to_in_python(
    locations: list[tuple[str, str, int]],
    runs: list[list[tuple[int, int, int, int]]],
    max_strings: int,
    recycles: bool,
    stack_limits: tuple[int, int] | None,
    per_frame: int,
    frame_bytes: int,
    pieces: bool,
    data: st.DataObject,
) -> None:
    encoders = [
        StreamEncoder(frame_bytes, per_frame, max_strings, accelerated=accelerated) for accelerated in (True, False)
    ]
    for encoder in encoders:
        encoder.strings.recycles = encoder.stacks.recycles = recycles
        encoder.strings.keeps_retired = encoder.stacks.keeps_retired = True
    shared: list[tuple[str, str, int]] = []  # the tracer's table: it grows between runs
    batches: list[list[EncodedBatch]] = [[], []]
    for number, calls in enumerate(runs):
        shared.extend(locations[: len(shared) + 3][len(shared) :])
        run = CallRun(pack_records([(s, s + d, i % len(shared), k) for s, d, i, k in calls]), shared)
        if stack_limits is not None and number == data.draw(st.integers(0, len(runs)), label="limited at run"):
            for encoder in encoders:  # a collector's WELCOME, between two runs
                encoder.stacks.limit_to(*stack_limits)
                encoder.strings.limit_to(max(2, max_strings // 2))
        for encoder, made, given_run in zip(encoders, batches, (run, run.as_flat()), strict=True):
            if pieces:
                made.extend(batch for batch, _ in encoder.encode_pieces(TRACK, given_run))
            else:
                made.append(encoder.encode(TRACK, given_run))
        assert frames_of(batches[0]) == frames_of(batches[1])
        assert counters(encoders[0]) == counters(encoders[1])
    # ... and a frame of an earlier epoch packs again in the current one the same way too (a reconnect's queue)
    for batch in batches[0]:
        for frame, _ in batch.events:
            repacked = [encoder.repack(frame, batch.epoch) for encoder in encoders]
            assert frames_of(repacked[:1]) == frames_of(repacked[1:])


@needs_c
def test_a_run_of_calls_packs_in_c_as_flat_records_pack_in_c() -> None:
    locations = [(f"f{i}", f"m{i % 7}.py", i) for i in range(200)]
    calls = [(1_000 * i, 1_000 * i + 7 * i, (i * 37) % 200, CALL if i % 11 else CALL_RAISED) for i in range(20_000)]
    run = CallRun(pack_records(calls), locations)
    by_c, by_flat = StreamEncoder(), StreamEncoder()
    assert frames_of([by_c.encode(TRACK, run)]) == frames_of([by_flat.encode(TRACK, run.as_flat())])
    assert CALLS_ACCELERATED


@needs_c
def test_a_frame_past_the_byte_limit_is_split_as_the_python_path_splits_it() -> None:
    locations = [("f" * 200, "app.py", 1)]
    run = CallRun(pack_records([(i, i + 1, 0, CALL) for i in range(5_000)]), locations)
    by_c = StreamEncoder(MIN_MAX_FRAME_BYTES, accelerated=True)
    by_python = StreamEncoder(MIN_MAX_FRAME_BYTES, accelerated=False)
    packed = by_c.encode(TRACK, run)
    assert len(packed.events) > 1 and all(len(frame) <= MIN_MAX_FRAME_BYTES for frame, _ in packed.events)
    assert frames_of([packed]) == frames_of([by_python.encode(TRACK, run.as_flat())])


@pytest.mark.parametrize("accelerated", [pytest.param(True, marks=needs_c), False])
@pytest.mark.parametrize(
    ("record", "message"),
    [((1, 2, 3, CALL), "location index 3 is past the 3 locations"), ((1, 2, 0, 7), "kind 7 is not a call kind")],
)
def test_records_naming_no_location_or_no_call_kind_are_refused(
    accelerated: bool, record: tuple[int, int, int, int], message: str
) -> None:
    encoder = StreamEncoder(accelerated=accelerated)
    with pytest.raises((ValueError, IndexError)) as raised:
        encoder.encode(TRACK, CallRun(pack_records([(1, 2, 0, CALL), record]), LOCATIONS))
    if accelerated or "kind" in message:
        assert message in str(raised.value)
    stream = Stream(encoder)  # nothing half done: the next run is whole, the locations met before the bad one too
    stream.write(encoder.encode(TRACK, CallRun(pack_records([(5, 6, 2, CALL), (7, 8, 0, CALL)]), LOCATIONS)))
    assert [(e.name, e.args) for e in stream.events] == [("len", {"file": "", "line": 0}), ("main", LOCATION_0)]


@needs_c
def test_the_c_packer_checks_what_it_is_given() -> None:
    from array import array

    from ringtrace.wire import _packer

    names, stacks = array("q", [0]), array("q", [0])
    record = RECORD.pack(1, 2, 0, CALL)
    with pytest.raises(ValueError, match="not whole records"):
        _packer.pack_calls(record[:-1], 0, 1, names, stacks, 9, 1, 1 << 20)
    with pytest.raises(ValueError, match="not whole records"):
        _packer.pack_calls(record, 1, 1, names, stacks, 9, 1, 1 << 20)
    with pytest.raises(TypeError, match="arrays of int64"):
        _packer.pack_calls(record, 0, 1, array("i", [0]), stacks, 9, 1, 1 << 20)
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        _packer.pack_calls(record, 0, 1, names, stacks, 9, 2**32, 1 << 20)
    with pytest.raises(OverflowError, match="before 0"):
        _packer.pack_calls(RECORD.pack(-1, 2, 0, CALL), 0, 1, names, stacks, 9, 1, 1 << 20)
    frame, overflowed, stackless = _packer.pack_calls(record, 0, 1, names, array("q", [-1]), 0, 1, 1 << 20)
    assert (overflowed, stackless) == (1, 1) and frame is not None
    assert _packer.pack_calls(record, 0, 1, array("q", [-1]), stacks, 9, 1, 1 << 20) == [0]


def test_a_frame_packed_in_an_earlier_epoch_names_its_calls_stacks_in_the_current_one() -> None:
    encoder = StreamEncoder()
    encoder.strings.recycles = encoder.strings.keeps_retired = True
    encoder.stacks.recycles = encoder.stacks.keeps_retired = True
    encoder.stacks.limit_to(2, 2)  # room for two calls' stacks
    early = encoder.encode(TRACK, CallRun(pack_records([(1, 2, 0, CALL), (3, 4, 1, CALL)]), LOCATIONS))
    encoder.encode(TRACK, CallRun(pack_records([(5, 6, 2, CALL)]), LOCATIONS))  # the tables start again
    assert encoder.strings.epoch > early.epoch and encoder.stacks.restarted_since(early.epoch)
    stream = Stream(encoder)
    for frame, _ in early.events:
        stream.write(encoder.repack(frame, early.epoch))
    assert [(e.name, e.args) for e in stream.events] == [
        ("main", {"file": "app.py", "line": 10}),  # its stack's id in the table now
        ("Parser.parse", None),  # the table now (len's, then main's) has no room for it: counted, as for a sample
    ]
    assert encoder.stats(0, 0, 0).clipped_args == 1


def test_a_run_of_calls_is_handed_to_listeners_as_it_is_and_counted_by_its_calls() -> None:
    run = CallRun(pack_records([(1, 2, 0, CALL), (3, 4, 1, CALL_RAISED)]), LOCATIONS)
    assert with_maps(run) is run  # (what the flusher gives listeners that may keep what they get)
    assert event_count(run) == 2 and event_count([CALL, "main", 1, 2, None]) == 1
