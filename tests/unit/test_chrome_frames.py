"""The C writer of Chrome JSON (``chrome_frames.py``) against the Python walk that defines what a snapshot shows: the
same events, the same loss counts, for every kind of event, any args, filters, and payloads that are not what they
should be."""

from __future__ import annotations

import json
import math
from array import array
from pathlib import Path
from typing import Any

import msgpack
import pytest
from arg_values import ARG_VALUES
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded_files import recorded
from ringtrace.client import Event, Timeline, string, u16
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.chrome_frames import ACCELERATED, FrameJson
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView, segment_stream
from ringtrace.collector.read.selection import EVERYTHING, EventFilter
from ringtrace.wire.frame_types import FRAME_HEADER, FrameType
from ringtrace.wire.frames import Events, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import INSTANT, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="the C writer is not built here (or RINGTRACE_PURE_PYTHON)")

TRACK = TrackInfo(7, THREAD_TRACK, "main", 1)


class Packet(Event):
    size: u16
    proto: string


def both(view: SnapshotView, selected: EventFilter = EVERYTHING) -> tuple[dict[str, Any], dict[str, Any]]:
    """The snapshot written with the C writer and without, each parsed."""
    fast = json.loads(b"".join(chrome_trace_chunks(view, selected)))
    slow = json.loads(b"".join(chrome_trace_chunks(view, selected, accelerated=False)))
    return fast, slow


def same_snapshot(fast: dict[str, Any], slow: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert that the two hold the same events (in any order within a frame) and the same report; the events."""

    def key(event: dict[str, Any]) -> str:
        return json.dumps(event, sort_keys=True)

    assert sorted(fast["traceEvents"], key=key) == sorted(slow["traceEvents"], key=key)
    assert fast["otherData"] == slow["otherData"]
    return list(fast["traceEvents"])


def test_every_kind_of_event_is_shown_alike(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        warn = tl.message("net", "warning", "lost $count packets from $peer")
        said = tl.message("app", "info", "${text} at $step")  # ${name}: the value alone
        disk = tl.source("disk")
        for i in range(300):
            said(f"line {i}", i)
            with tl.scope("work", i=i, text='a"b\\c\nd\x01 ü ✓'):
                tl.instant("tick", f=i / 7, big=2**64 - 1, neg=-(2**63), nan=math.nan, inf=-math.inf)
            tl.instant("bare")
            tl.counter("queue", i % 5)
            tl.counter("ratio", i / 3)
            warn(count=i, peer="10.0.0.1")
            tl.marker("phase", "start", step=i)
            tl.marker("phase", "end")
            tl.marker("orphan", "end")
            disk.open()
            disk.close()
            tl.async_begin("request", i, url="/x")
            tl.async_end("request", i)
            tl.push(Packet(size=i, proto="udp"))
            tl.instant("odd", raw=b"\x00\xff", keys={5: "int key"}, nested={"a": [1, {"b": None}]})
            if i % 50 == 0:
                tl.flush(timeout_s=30)

    fast, slow = both(recorded(tmp_path, record))
    events = same_snapshot(fast, slow)
    phases = {e["ph"] for e in events}
    assert {"X", "i", "C", "b", "e", "M"} <= phases
    tick = next(e for e in events if e["name"] == "tick")
    assert tick["args"]["big"] == 2**64 - 1 and tick["args"]["nan"] is None and tick["args"]["inf"] is None
    work = next(e for e in events if e["name"] == "work")
    assert work["args"]["text"] == 'a"b\\c\nd\x01 ü ✓'
    assert sum(e["name"] == "work" for e in events) == 300
    assert fast["otherData"]["unmatched_marker_ends"] == 300
    shown = {e["name"] for e in events if e.get("cat") in ("net", "app")}
    assert {"lost count(7) packets from peer(10.0.0.1)", "line 7 at step(7)"} <= shown


def test_filters_by_time_pid_and_track_select_alike(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        for i in range(2000):
            with tl.scope("work", i=i):
                pass
            if i % 100 == 0:
                tl.flush(timeout_s=30)

    view = recorded(tmp_path, record)
    _, whole = both(view)
    starts = sorted(e["ts"] for e in whole["traceEvents"] if e["ph"] == "X")
    origin = view.origin_ns
    since = origin + int(starts[500] * 1000)
    until = origin + int(starts[1500] * 1000)
    for selected in (
        EventFilter(since_ns=since),
        EventFilter(until_ns=until),
        EventFilter(since_ns=since, until_ns=until),
        EventFilter(limit=10),
        EventFilter(name=None, since_ns=until),
    ):
        fast, slow = both(view, selected)
        events = same_snapshot(fast, slow)
        assert 0 < sum(e["ph"] == "X" for e in events) < 2000


@settings(max_examples=150, deadline=None)
@given(args=st.dictionaries(st.text(max_size=12), ARG_VALUES, max_size=5), name=st.text(max_size=20))
def test_any_args_are_written_alike(tmp_path_factory: pytest.TempPathFactory, args: dict[str, Any], name: str) -> None:
    view = recorded(tmp_path_factory.mktemp("args"), lambda tl: [tl.instant(name, **args), tl.counter(name, 1.5)])
    fast, slow = both(view)
    same_snapshot(fast, slow)


# -- payloads that are not what they should be ------------------------------------------------------------------------


def stream_with(tmp_path: Path, payloads: list[tuple[int, bytes]]) -> SnapshotView:
    """A file of one stream whose EVENTS frames carry ``payloads`` ((count, payload) each) as given, on a track that
    declares the spans, instants and counters of a real encoder."""
    encoder = StreamEncoder()
    batch = encoder.encode(TRACK, [SPAN, "a", 10**18, 10**18 + 5, {"k": 1}, INSTANT, "b", 10**18, 10**18, None])
    frames = [preamble(), encode(Hello(1, "host", "bad", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    frames += [*batch.control, *(frame for frame, _ in batch.events)]
    for count, payload in payloads:
        frames.append(encode(Events(TRACK.track_id, count, 10**18, 10**18 + 10, payload)))
    path = tmp_path / "bad.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


def good_payload(batch_frame: bytes) -> list[Any]:
    body = batch_frame[FRAME_HEADER.size :]
    assert FRAME_HEADER.unpack_from(batch_frame)[1] == FrameType.EVENTS
    return msgpack.unpackb(Events.decode_body(body).payload, raw=False, strict_map_key=False)  # type: ignore[no-any-return]


def columns(kinds: list[Any], names: list[Any], ts: list[Any], dur: list[Any], args: list[Any]) -> bytes:
    return msgpack.packb([kinds, names, ts, dur, args])  # type: ignore[no-any-return]


def odd_payloads() -> list[tuple[str, int, bytes]]:
    """(what the C writer makes of it, count, payload): "shown", "skipped" (counted undecodable), "deferred" (to the
    Python walk) or "refused" (the Python walk reads the whole frame)."""
    encoder = StreamEncoder()
    batch = encoder.encode(TRACK, [SPAN, "a", 10**18, 10**18 + 5, {"k": 1}])
    span_kind, name_id = good_payload(batch.events[0][0])[0][0], good_payload(batch.events[0][0])[1][0]

    def with_args(raw: bytes, kind: int = span_kind) -> bytes:
        return columns([kind], [name_id], [0], [0], [None])[:-1] + raw  # the args column is last

    def timestamp(nanoseconds: int) -> bytes:  # msgpack's timestamp 64: 30 bits of ns, 34 of seconds
        return b"\x81\xa1t\xd7\xff" + ((nanoseconds << 34) | 1).to_bytes(8, "big")

    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    good = columns([span_kind], [name_id], [0], [5], [{"k": 1}])
    shown_then_not = columns([span_kind, 999], [name_id] * 2, [0, 1], [5, 5], [None, None])[:-3]  # args last
    return [
        ("shown", 1, good),
        ("refused", 1, good + b"\x00"),  # trailing bytes
        ("refused", 2, good),  # a count the columns do not hold
        ("refused", 1, with_args(b"\x81\xa1\xff\x01")),  # a map key that is not UTF-8
        ("refused", 1, columns([span_kind], [name_id], [True], [5], [None])),  # a bool is not an integer
        ("refused", 1, columns([{}], [name_id], [0], [5], [None])),  # nor is a map (a file with one still loads)
        ("skipped", 1, columns([span_kind], [name_id], [0], [-5], [None])),  # a negative duration
        ("skipped", 1, columns([span_kind], [name_id], [-(10**18) - 1], [0], [None])),  # before the epoch
        ("skipped", 1, columns([span_kind], [name_id], [2**63], [0], [None])),  # past what a wall clock gives
        ("skipped", 1, columns([999], [name_id], [0], [0], [None])),  # a kind never declared
        ("deferred", 1, columns([span_kind], [12345], [0], [0], [None])),  # a string never declared
        ("deferred", 1, columns([span_kind], [name_id], [0], [0], [[1, 2]])),  # args that are not a map
        ("deferred", 1, with_args(b"\x81\xa1e\xc7\x03\x05xyz")),  # an extension type
        ("deferred", 1, with_args(b"\x81\x05\x01")),  # an int key
        ("refused", 1, with_args(b"\x81\x91\x01\x01")),  # a key msgpack-python cannot hash
        ("refused", 1, with_args(b"\x81\xa1t\xc7\x03\xffxyz")),  # a timestamp extension of 3 bytes
        ("refused", 1, with_args(timestamp(10**9), kind=999)),  # past 999,999,999 ns, in an event never shown
        ("skipped", 1, with_args(timestamp(10**9 - 1), kind=999)),  # a timestamp as it should be
        ("deferred", 1, with_args(timestamp(5))),  # (an extension type: the Python walk shows it)
        ("refused", 1, with_args(b"\x81\xa1e\xd4\xfe\x00")),  # an extension code msgpack-python refuses (-2)
        ("refused", 1, with_args(b"\x81\xa1e\xc7\x01\x80x", kind=999)),  # (-128) in an event never shown
        ("refused", 2, shown_then_not + b"\x92\xc0\x81\xa1e\xd5\xe0\x00\x00"),  # (-32) after an event shown
        ("refused", 1, columns([span_kind], [name_id], [0], [0], [{"d": deep}])),  # deeper than the C writer goes
        ("shown", 2, columns([span_kind, span_kind], [name_id, name_id], [0, 1], [3, 0], [None, {"v": [1.5]}])),
    ]


def test_the_c_writer_takes_common_events_and_leaves_the_rest(tmp_path: Path) -> None:
    expected = odd_payloads()
    view = stream_with(tmp_path, [(count, payload) for _, count, payload in expected])
    (segment,) = view.frames.segments
    writer = FrameJson(origin_ns=0)
    made = []
    for decoder, frame in segment_stream(segment, view.limits):
        if isinstance(frame, Events) and frame.first_ts_ns == 10**18 and frame.last_ts_ns == 10**18 + 10:
            made.append(writer.events(decoder.tables, frame, 0, 1, 2))
    outcomes = []
    for result in made:
        if result is None:
            outcomes.append("refused")
        elif result.deferred is not None:
            outcomes.append("deferred")
        else:
            outcomes.append("skipped" if result.skipped else "shown")
    assert outcomes == [what for what, _, _ in expected]
    assert made[0] is not None and json.loads(b"[" + made[0].json + b"]") == [
        {"name": "a", "ph": "X", "ts": 1e15, "pid": 1, "tid": 2, "dur": 0.005, "args": {"k": 1}}
    ]


def test_payloads_that_are_not_what_they_should_be_are_counted_alike(tmp_path: Path) -> None:
    view = stream_with(tmp_path, [(count, payload) for _, count, payload in odd_payloads()])
    fast, slow = both(view)
    events = same_snapshot(fast, slow)
    expected = odd_payloads()
    skipped = sum(count for what, count, _ in expected if what == "skipped")
    assert fast["otherData"]["undecodable_events"] >= skipped + 4  # and the frames refused whole
    shown = sum(count for what, count, _ in expected if what == "shown")
    assert sum(e.get("name") == "a" and e["ph"] == "X" for e in events) >= shown + 1  # the first frame's span too


def test_string_spans_are_read_from_a_buffer_at_any_alignment() -> None:
    from ringtrace.collector.export import _chrome  # here: not built everywhere

    spans = array("q", [0, 3]).tobytes()
    made = []
    for view in (memoryview(spans), memoryview(b"-" + spans)[1:]):
        payload = columns([0], [0], [0], [5], [None])
        made.append(
            _chrome.events_json(payload, 1, (0, 1, 2, 3, 4), 10**18, 0, 0, None, None, b"X", b'"a"', view, b"", b"")
        )
    assert made[0] == made[1]
    assert made[0] is not None and made[0][0].startswith(b'{"name":"a","ph":"X"')
