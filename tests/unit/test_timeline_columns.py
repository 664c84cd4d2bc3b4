"""The ``/timeline`` document (``export/timeline_columns.py``): its frames read column by column
(``timeline_frames.py``) against the event walk that defines what is shown, for every kind of event, any args,
filters and payloads that are not what they should be; and the same events as the Chrome JSON snapshot."""

from __future__ import annotations

import json
import math
from collections import Counter
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
from ringtrace.collector.export.timeline_columns import timeline_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.query import EVERYTHING, EventFilter, Pattern
from ringtrace.wire.frames import FRAME_HEADER, Events, Hello, encode, preamble
from ringtrace.wire.model import COUNTER, INSTANT, SPAN, THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder


class Packet(Event):
    size: u16
    proto: string


def document(view: SnapshotView, selected: EventFilter = EVERYTHING, accelerated: bool = True) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(b"".join(timeline_chunks(view, selected, accelerated=accelerated)))
    return parsed


def shown(doc: dict[str, Any]) -> list[str]:
    """Every event of a document as one JSON text (name resolved, track named), sorted: frames' events may come in
    another order within a frame, and names in another order in the table."""
    tracks = {track["index"]: track for track in doc["tracks"]}
    out = []
    for block in doc["blocks"]:
        track = tracks[block["track"]]
        for i, phase in enumerate(block["ph"]):
            event = {
                "ph": phase,
                "name": doc["names"][block["name"][i]],
                "ts": block["ts"][i],
                "dur": block["dur"][i],
                "args": block["args"][i],
                "id": block["id"][i] if "id" in block else "",
                "track": [track["pid"], track["name"], track["kind"]],
            }
            out.append(json.dumps(event, sort_keys=True))
    return sorted(out)


def alike(view: SnapshotView, selected: EventFilter = EVERYTHING) -> list[str]:
    """Assert the document read column by column is the walk's (events, tracks, report); its events."""
    fast, slow = document(view, selected), document(view, selected, accelerated=False)
    assert shown(fast) == shown(slow)
    assert fast["report"] == slow["report"]
    assert fast["capture"] == slow["capture"]
    assert fast["origin_ns"] == slow["origin_ns"]
    return shown(fast)


def test_every_kind_of_event_is_shown_alike_and_as_in_chrome_json(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        warn = tl.message("net", "warning", "lost $count packets from $peer")
        disk = tl.source("disk")
        for i in range(300):
            with tl.scope("work", i=i, text='a"b\\c\nd ü ✓'):
                tl.instant("tick", f=i / 7, big=2**64 - 1, nan=math.nan)
            tl.instant("bare")
            tl.counter("queue", i % 5)
            warn(count=i, peer="10.0.0.1")
            tl.marker("phase", "start", step=i)
            tl.marker("phase", "end")
            tl.marker("orphan", "end")
            disk.open()
            disk.close()
            tl.async_begin("request", i, url="/x")
            tl.async_end("request", i)
            tl.push(Packet(size=i, proto="udp"))
            if i % 50 == 0:
                tl.flush(timeout_s=30)
        tl.marker("never ended", "start")

    view = recorded(tmp_path, record)
    events = [json.loads(event) for event in alike(view)]
    chrome = json.loads(b"".join(chrome_trace_chunks(view)))
    in_chrome = Counter((e["ph"], e["name"]) for e in chrome["traceEvents"] if e["ph"] != "M")
    assert Counter((e["ph"], e["name"]) for e in events) == in_chrome
    assert {e["ph"] for e in events} == {"X", "B", "i", "C", "b", "e"}
    (never,) = [e for e in events if e["ph"] == "B"]
    assert (never["name"], never["dur"]) == ("never ended", -1)
    work = [e for e in events if e["name"] == "work"]
    assert len(work) == 300 and all(e["dur"] >= 0 for e in work)
    assert document(view)["report"]["unmatched_marker_ends"] == 300


def test_times_are_ns_since_the_origin_as_chrome_json_s_are_us(tmp_path: Path) -> None:
    view = recorded(tmp_path, lambda tl: [tl.instant("a"), tl.counter("c", 2)])
    doc = document(view)
    chrome = json.loads(b"".join(chrome_trace_chunks(view)))
    ours = sorted(ts for block in doc["blocks"] for ts in block["ts"])
    theirs = sorted(round(e["ts"] * 1000) for e in chrome["traceEvents"] if e["ph"] != "M")
    assert ours == theirs
    assert doc["origin_ns"] == chrome["otherData"]["clock_origin_wall_ns"]


def test_filters_select_alike(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        for i in range(2000):
            with tl.scope("work", i=i):
                pass
            if i % 100 == 0:
                tl.counter("n", i)
                tl.flush(timeout_s=30)

    view = recorded(tmp_path, record)
    starts = sorted(json.loads(event)["ts"] for event in alike(view))
    since = view.origin_ns + starts[500]
    until = view.origin_ns + starts[1500]
    for selected in (
        EventFilter(since_ns=since),
        EventFilter(until_ns=until),
        EventFilter(since_ns=since, until_ns=until),
        EventFilter(limit=10),
        EventFilter(category=Pattern("counter")),
    ):
        events = alike(view, selected)
        assert 0 < len(events) < 2020


@settings(max_examples=100, deadline=None)
@given(args=st.dictionaries(st.text(max_size=12), ARG_VALUES, max_size=5), name=st.text(max_size=20))
def test_any_args_are_shown_alike(tmp_path_factory: pytest.TempPathFactory, args: dict[str, Any], name: str) -> None:
    view = recorded(tmp_path_factory.mktemp("args"), lambda tl: [tl.instant(name, **args), tl.counter(name, 1.5)])
    alike(view)


TRACK = TrackInfo(7, THREAD_TRACK, "main", 1)
#: What the stream of ``stream_with`` holds first: a span, an instant and a counter named a, b and c.
PREFIX_EVENTS = [SPAN, "a", 10**18, 10**18 + 5, {"k": 1}, INSTANT, "b", 10**18, 10**18, None, COUNTER, "c", 10**18,
                 10**18, {"value": 1}]  # fmt: skip


def stream_with(tmp_path: Path, payloads: list[tuple[int, list[Any]]]) -> SnapshotView:
    """A file of one stream whose EVENTS frames hold these columns ((count, [kinds, names, ts, dur, args]) each) as
    given, on a track whose tables declare a real encoder's spans, instants, counters and strings."""
    encoder = StreamEncoder()
    batch = encoder.encode(TRACK, PREFIX_EVENTS)
    frames = [preamble(), encode(Hello(1, "host", "odd", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    frames += [*batch.control, *(frame for frame, _ in batch.events)]
    for count, columns in payloads:
        frames.append(encode(Events(TRACK.track_id, count, 10**18, 10**18 + 10, msgpack.packb(columns))))
    path = tmp_path / "odd.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


def known_ids() -> tuple[list[int], list[int]]:
    """The kind ids and name ids that the encoder of ``stream_with`` declares: span, instant, counter; a, b, c."""
    batch = StreamEncoder().encode(TRACK, PREFIX_EVENTS)
    frame = batch.events[0][0]
    body = Events.decode_body(frame[FRAME_HEADER.size :])
    columns = msgpack.unpackb(body.payload, raw=False, strict_map_key=False)
    return columns[0], columns[1]


@pytest.mark.parametrize(
    "case",
    [
        "a kind never declared",
        "a name never declared",
        "args that are a list",
        "a negative time",
        "a time past 2262",
        "a span that ends before it starts",
        "a float time",
        "an unhashable kind",
        "columns of unequal lengths",
        "a mixed frame",
        "an instant and a counter with a duration",
        "a mixed frame with an instant's duration",
        "a kind that is a boolean",
        "a name id that is a boolean",
    ],
)
def test_payloads_that_are_not_what_they_should_be_are_shown_alike(tmp_path: Path, case: str) -> None:
    (span, instant, counter), (a, b, c) = known_ids()
    kinds, names, ts, dur, args = [span, instant, counter], [a, b, c], [0, 1, 2], [5, 0, 0], [{"k": 1}, None, {"v": 2}]
    if case == "a kind never declared":
        kinds[1] = 999
    elif case == "a name never declared":
        names[0] = 12345
    elif case == "args that are a list":
        args[0] = [1, 2]
    elif case == "a negative time":
        ts[0] = -(10**18) - 1
    elif case == "a time past 2262":
        ts[2] = 2**63
    elif case == "a span that ends before it starts":
        dur[0] = -10
    elif case == "a float time":
        ts[1] = 1.5
    elif case == "an unhashable kind":
        kinds[2] = [1]
    elif case == "columns of unequal lengths":
        args = args[:2]
    elif case == "a mixed frame":
        kinds, names, ts, dur, args = kinds * 2, names * 2, ts * 2, dur * 2, args * 2
        kinds[4] = 999
    elif case == "an instant and a counter with a duration":  # they have none: the walk shows 0
        dur = [5, 7, 9]
    elif case == "a mixed frame with an instant's duration":
        kinds, names, ts, dur, args = kinds * 2, names * 2, ts * 2, [5, 7, 9] * 2, args * 2
        kinds[3] = 999
    elif case == "a kind that is a boolean":  # the walk refuses the frame; True is no kind 1
        kinds = [kind if kind not in (0, 1) else bool(kind) for kind in kinds]
    elif case == "a name id that is a boolean":
        names = [name if name not in (0, 1) else bool(name) for name in names]
    if case.endswith("is a boolean"):
        assert bool in set(map(type, kinds + names))
    view = stream_with(tmp_path, [(len(kinds), [kinds, names, ts, dur, args])])
    alike(view)
