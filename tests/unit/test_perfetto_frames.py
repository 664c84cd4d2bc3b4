"""The C writer of Perfetto packets (``perfetto_frames.py``) against the Python writer that defines what a trace holds:
the same bytes, whichever writer wrote each frame, for every kind of event, any args, filters, and payloads that are
not what they should be."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgpack
import pytest
from arg_values import ARG_VALUES
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_model import PerfettoTrace
from recorded_files import recorded
from ringtrace.client import Timeline
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.export.perfetto_frames import ACCELERATED, FramePackets, Naming
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView, segment_stream
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Pattern
from ringtrace.wire.frame_types import FRAME_HEADER, FrameType
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import COUNTER, INSTANT, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="the C writer is not built here (or RINGTRACE_PURE_PYTHON)")

TRACK = TrackInfo(7, THREAD_TRACK, "main", 1)
BASE_NS = 10**18


def both(view: SnapshotView, selected: EventFilter = EVERYTHING) -> bytes:
    """The trace written with the C writer, asserted to be the same bytes as without it."""
    fast = b"".join(perfetto_chunks(view, selected))
    slow = b"".join(perfetto_chunks(view, selected, accelerated=False))
    assert fast == slow
    return fast


def taken_frames(view: SnapshotView) -> list[bool]:
    """For each stored EVENTS frame, whether the C writer takes it (its naming functions answer anything)."""
    naming = Naming(lambda: (b"X", b"T"), lambda _: b"N", lambda _: b"A", lambda _, __: b"C")
    writer = FramePackets()
    taken = []
    for segment in view.frames.segments:
        for decoder, frame in segment_stream(segment, view.limits):
            if isinstance(frame, Events):
                taken.append(writer.packets(decoder.tables, frame, 0, naming) is not None)
    return taken


def test_every_kind_of_event_is_written_alike(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        warn = tl.message("net", "warning", "lost $count packets from $peer")
        said = tl.message("app", "info", "${text} at $step")  # ${name}: the value alone
        disk = tl.source("disk")
        for i in range(300):
            with tl.scope("work", i=i, text='a"b\\c\nd\x01 ü ✓', long="x" * (200 + i)):
                tl.instant("tick", f=i / 7, big=2**64 - 1, neg=-(2**63), nan=math.nan, inf=-math.inf)
            tl.instant("bare")
            tl.counter("queue", i % 5)
            tl.counter("ratio", i / 3)
            tl.instant("nested", m={"a": [1, {"b": None}], "e": {}, "l": []}, t=True, f=False)
            if i % 3 == 0:  # frames of common events (the C writer's), then frames with the others in them
                tl.flush(timeout_s=30)
                continue
            warn(count=i, peer="10.0.0.1")
            said(f"line {i}", i)
            tl.marker("phase", "start", step=i)
            tl.marker("phase", "end")
            disk.open()
            disk.close()
            tl.async_begin("request", i, url="/x")
            tl.async_end("request", i)
            tl.instant("odd", raw=b"\x00\xff", keys={5: "int key"})
            tl.flush(timeout_s=30)

    view = recorded(tmp_path, record)
    taken = taken_frames(view)
    assert any(taken) and not all(taken)
    trace = PerfettoTrace(both(view))
    assert sum(s.name == "work" for s in trace.slices) == 300
    assert sum(i.name == "tick" for i in trace.instants) == 300
    assert len(trace.counters) == 600
    tick = next(i for i in trace.instants if i.name == "tick")
    assert tick.args["big"] == 2**64 - 1 and tick.args["neg"] == -(2**63) and math.isnan(tick.args["nan"])
    shown = {i.name for i in trace.instants}
    assert {"lost count(7) packets from peer(10.0.0.1)", "line 7 at step(7)"} <= shown


def test_filters_by_time_pid_and_track_select_alike(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        for i in range(2000):
            with tl.scope("work", i=i):
                pass
            if i % 100 == 0:
                tl.flush(timeout_s=30)

    view = recorded(tmp_path, record)
    starts = sorted(s.start_ns for s in PerfettoTrace(both(view)).slices)
    since, until = starts[500], starts[1500]
    for selected in (
        EventFilter(since_ns=since),
        EventFilter(until_ns=until),
        EventFilter(since_ns=since, until_ns=until),
        EventFilter(limit=10),
        EventFilter(track=Pattern("unit*")),
        EventFilter(track=Pattern("none such")),
        EventFilter(name=Pattern("work")),
    ):
        both(view, selected)


@settings(max_examples=150, deadline=None)
@given(
    args=st.dictionaries(st.text(max_size=12), ARG_VALUES, max_size=5),
    name=st.text(max_size=20),
    value=st.integers(-(2**63), 2**64 - 1) | st.floats(),
)
def test_any_args_are_written_alike(
    tmp_path_factory: pytest.TempPathFactory, args: dict[str, Any], name: str, value: float
) -> None:
    def record(tl: Timeline) -> None:
        tl.instant(name, **args)
        with tl.scope(name, **args):
            tl.counter(name, value)

    both(recorded(tmp_path_factory.mktemp("args"), record))


def test_names_interned_by_either_writer_are_shared_on_the_sequence(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        for i in range(40):
            tl.instant(f"name {i % 7}", **{f"key {i % 5}": i})
            if i % 4 == 3:
                tl.message("app", "info", f"message {i}")()  # a frame the Python writer writes
            tl.flush(timeout_s=30)

    view = recorded(tmp_path, record)
    # Each flush's events in a frame of their own (with the C recorder a message with no values is a compact record as
    # the instant is, in the same run): the C writer takes the 30 without a message.
    assert sum(taken_frames(view)) == 30
    trace = PerfettoTrace(both(view))  # checks each use of an interned name
    assert sorted(i.name for i in trace.instants if i.name.startswith("name")) == sorted(
        f"name {i % 7}" for i in range(40)
    )


# -- payloads that are not what they should be ------------------------------------------------------------------------


def declared() -> tuple[list[bytes], dict[str, int]]:
    """The frames that open a stream and declare a span, an instant and a counter kind, and the name "a", and their
    ids as the payloads use them."""
    encoder = StreamEncoder()
    records = [SPAN, "a", BASE_NS, BASE_NS + 5, None, INSTANT, "a", BASE_NS, BASE_NS, None]
    batch = encoder.encode(TRACK, [*records, COUNTER, "a", BASE_NS, BASE_NS, {"value": 1}])
    (frame, _), *_ = batch.events
    assert FRAME_HEADER.unpack_from(frame)[1] == FrameType.EVENTS
    kinds, names, *_ = msgpack.unpackb(Events.decode_body(frame[FRAME_HEADER.size :]).payload)
    frames = [preamble(), encode(Hello(1, "host", "bad", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    frames += [*batch.control, *(frame for frame, _ in batch.events)]
    return frames, {"span": kinds[0], "instant": kinds[1], "counter": kinds[2], "a": names[0]}


def columns(kinds: list[Any], names: list[Any], ts: list[Any], dur: list[Any], args: list[Any]) -> bytes:
    return msgpack.packb([kinds, names, ts, dur, args])  # type: ignore[no-any-return]


def odd_payloads() -> list[tuple[str, int, bytes]]:
    """(what the C writer makes of the frame, count, payload): "written", "skipped" (counted undecodable, nothing
    written) or "python" (the Python writer writes the frame, or refuses it)."""
    _, ids = declared()
    span, instant, counter, a = ids["span"], ids["instant"], ids["counter"], ids["a"]

    def with_args(raw: bytes, kind: int = span) -> bytes:
        return columns([kind], [a], [0], [0], [None])[:-1] + raw  # the args column is last

    def timestamp(nanoseconds: int) -> bytes:  # msgpack's timestamp 64: 30 bits of ns, 34 of seconds
        return b"\x81\xa1t\xd7\xff" + ((nanoseconds << 34) | 1).to_bytes(8, "big")

    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    good = columns([span], [a], [0], [5], [{"k": 1}])
    many = {f"k{i}": i for i in range(65)}
    return [
        ("written", 1, good),
        ("python", 1, good + b"\x00"),  # trailing bytes
        ("python", 2, good),  # a count the columns do not hold
        ("python", 1, good[:-3]),  # cut short
        ("python", 1, with_args(b"\x81\xa1\xff\x01")),  # a map key that is not UTF-8
        ("python", 1, with_args(b"\x81\xa1k\xdb\xff\xff\xff\xff")),  # a string longer than the payload
        ("python", 1, with_args(b"\xdf\xff\xff\xff\xff")),  # a map of more entries than the payload holds
        ("python", 1, columns([span], [a], [True], [5], [None])),  # a bool is not an integer
        ("python", 1, columns([{}], [a], [0], [5], [None])),  # nor is a map
        ("skipped", 1, columns([span], [a], [0], [-5], [None])),  # a negative duration
        ("skipped", 1, columns([span], [a], [-BASE_NS - 1], [0], [None])),  # before the epoch
        ("skipped", 1, columns([span], [a], [2**63], [0], [None])),  # past what a wall clock gives
        ("skipped", 1, columns([span], [a], [0], [2**64 - 1], [None])),  # a duration past it
        ("skipped", 1, columns([999], [a], [0], [0], [None])),  # a kind never declared
        ("written", 1, columns([instant], [12345], [0], [0], [None])),  # a string never declared: named as such
        ("python", 1, columns([instant], [-1], [0], [0], [None])),  # a string id no table holds
        ("python", 1, columns([instant], [2**64 - 1], [0], [0], [None])),
        ("python", 1, columns([span], [a], [0], [0], [[1, 2]])),  # args that are not a map
        ("python", 1, columns([counter], [a], [0], [0], [7])),  # a counter's value alone
        ("python", 1, with_args(b"\x81\xa1e\xc7\x03\x05xyz")),  # an extension type
        ("python", 1, with_args(b"\x81\xa1e\xc4\x02\x00\xff")),  # bytes
        ("python", 1, with_args(b"\x81\x05\x01")),  # an int key
        ("python", 1, with_args(b"\x81\xa1m\x81\x05\x01")),  # an int key, nested
        ("python", 1, with_args(b"\x82\xa1k\x01\xa1k\x02")),  # a key twice (the last value, at the first place)
        ("python", 1, with_args(b"\x81\xa1m\x82\xa1k\x01\xa1k\x02")),  # a key twice, nested
        ("python", 1, columns([span], [a], [0], [0], [many])),  # more entries than the C writer compares
        ("written", 1, columns([span], [a], [0], [0], [{f"k{i}": i for i in range(64)}])),
        ("python", 1, with_args(b"\x81\x91\x01\x01")),  # a key msgpack-python cannot hash
        ("python", 1, with_args(b"\x81\xa1t\xc7\x03\xffxyz")),  # a timestamp extension of 3 bytes
        ("python", 1, with_args(timestamp(10**9), kind=999)),  # past 999,999,999 ns, in an event never shown
        ("skipped", 1, with_args(timestamp(10**9 - 1), kind=999)),  # a timestamp as it should be
        ("python", 1, with_args(timestamp(5))),  # (an extension type: the Python walk shows it)
        ("python", 1, with_args(b"\x81\xa1e\xd4\xfe\x00")),  # an extension code msgpack-python refuses (-2)
        ("python", 1, columns([span], [a], [0], [0], [{"d": deep}])),  # deeper than the C writer goes
        ("written", 1, with_args(b"\x81\xa1f\xca\x3f\xc0\x00\x00")),  # a float32
        ("written", 1, with_args(b"\x81\xa1s" + b"\xda\x01\x00" + b"s" * 256)),  # a str 16
        ("written", 1, columns([counter], [a], [0], [0], [{"value": 2**64 - 1, "x": 2**63 - 1, "y": -1.5}])),
        ("written", 1, columns([counter], [a], [0], [0], [{"n": None, "s": "x", "b": True, "l": [1], "m": {}}])),
        ("written", 1, columns([counter], [a], [0], [0], [None])),
        ("written", 1, with_args(b"\x81\xa1f\xca\x7f\xc0\x00\x00", kind=counter)),  # a float32 NaN
        ("written", 3, columns([span] * 3, [a] * 3, [0, 0, 0], [0, 3, 3], [None, {}, {"v": [1.5]}])),
    ]


def stream_with(tmp_path: Path, payloads: list[tuple[int, bytes]]) -> SnapshotView:
    """A file of one stream whose EVENTS frames carry ``payloads`` ((count, payload) each) as given."""
    frames, _ = declared()
    for count, payload in payloads:
        frames.append(encode(Events(TRACK.track_id, count, BASE_NS, BASE_NS + 10, payload)))
    path = tmp_path / "bad.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


def test_the_c_writer_takes_common_events_and_leaves_the_rest(tmp_path: Path) -> None:
    expected = odd_payloads()
    view = stream_with(tmp_path, [(count, payload) for _, count, payload in expected])
    (segment,) = view.frames.segments
    writer = FramePackets()
    asked: list[object] = []
    naming = Naming(
        lambda: asked.append("enter") or (b"\x58\x07", b"T"),
        lambda string_id: asked.append(string_id) or b"N",
        lambda key: asked.append(key) or b"A",
        lambda string_id, key: asked.append((string_id, key)) or b"C",
    )
    outcomes = []
    for decoder, frame in segment_stream(segment, view.limits):
        if isinstance(frame, Events) and frame.first_ts_ns == BASE_NS and frame.last_ts_ns == BASE_NS + 10:
            made = writer.packets(decoder.tables, frame, 0, naming)
            outcomes.append("python" if made is None else "skipped" if made.skipped else "written")
            assert made is None or made.skipped + made.shown == frame.count
    assert outcomes == [what for what, _, _ in expected]
    assert asked[:3] == ["enter", declared()[1]["a"], "k"]  # the first frame's: its track, its name, its key


def test_payloads_that_are_not_what_they_should_be_are_written_alike(tmp_path: Path) -> None:
    expected = odd_payloads()
    view = stream_with(tmp_path, [(count, payload) for _, count, payload in expected])
    trace = PerfettoTrace(both(view))
    assert {"a", "<unknown string 12345>"} <= {s.name for s in trace.slices} | {i.name for i in trace.instants}
    values = sorted(c.value for c in trace.counters if not math.isnan(c.value))
    assert values == sorted([1, 7, float(2**64 - 1), 2**63 - 1, -1.5])  # (7: a value alone, the Python writer's)


def test_counts_and_tables_are_not_trusted() -> None:
    from ringtrace.collector.export import _perfetto  # here: not built everywhere

    def call(payload: bytes, count: int, kinds: bytes = b"X") -> object:
        naming = Naming(lambda: (b"", b""), lambda _: b"", lambda _: b"", lambda _, __: b"")
        return _perfetto.frame_packets(payload, count, (0, 1, 2, 3, 4), BASE_NS, 0, None, None, kinds, *naming)

    good = columns([0], [0], [0], [5], [None])
    assert call(good, 1) is not None
    assert call(good, 10**9) is None  # more events than the payload has bytes
    assert call(good, 1, b"\x07") is None  # a code no kind has
    assert call(good, 1, b"") == (0, 1, 0, None, b"")  # a kind never declared: skipped
    with pytest.raises(TypeError, match="bytes"):
        _perfetto.frame_packets(good, 1, (0, 1, 2, 3, 4), BASE_NS, 0, None, None, b"X", lambda: (1, 2), *[print] * 3)
    with pytest.raises(ValueError, match="once"):
        _perfetto.frame_packets(good, 1, (0, 0, 2, 3, 4), BASE_NS, 0, None, None, b"X", *[print] * 4)
