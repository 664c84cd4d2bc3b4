"""Windows by overlap (``since``/``until``): spans that overlap the window, points in it, pairs (markers, async
slices) whole when their pair overlaps it, open-ended ones begun before ``until``; in every snapshot format, with the
C writers and without, against a brute-force reference over what was stored (``Hypothesis``-drawn stores)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_model import PerfettoTrace
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.native import native_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.export.timeline_columns import timeline_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.frame_walk import FrameWalk, ProcessView, SnapshotView
from ringtrace.collector.read.rows import selected_rows
from ringtrace.collector.read.selection import EventFilter, Pattern, Selection
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Store
from ringtrace.wire.frame_types import FRAME_HEADER
from ringtrace.wire.frames import Events, Stats, encode
from ringtrace.wire.model import ASYNC_BEGIN, ASYNC_END, INSTANT, MARKER_END, MARKER_START, SPAN
from ringtrace.wire.stream_limits import Limits
from store_client import Client

#: Stored times: microseconds from here (Chrome JSON's ``ts`` is in microseconds: exact).
BASE_NS = 10**18
US = 1000


@dataclass(frozen=True)
class Item:
    """One thing recorded: a span (``end`` its end), an instant (``end`` None), a marker or async pair (``end``
    None: never ended)."""

    what: str  # "span", "instant", "marker", "async"
    name: str
    start: int
    end: int | None
    #: A span that arrives at its start (a writer that sorts by start), not at its end as a client records it.
    early: bool = False


def records(items: list[Item]) -> list[list[Any]]:
    """The items as the encoder takes them ([kind, name, start, end, args] each), in the order they arrive: by time
    (a span's end: a client records it then), a pair's start before its end."""
    timed: list[tuple[int, int, list[Any]]] = []
    for order, item in enumerate(items):
        if item.what == "span":
            assert item.end is not None
            arrives = item.start if item.early else item.end  # (a client records a span at its end)
            timed.append((arrives, order, [SPAN, item.name, item.start, item.end, None]))
        elif item.what == "instant":
            timed.append((item.start, order, [INSTANT, item.name, item.start, item.start, None]))
        else:
            begin, end = (MARKER_START, MARKER_END) if item.what == "marker" else (ASYNC_BEGIN, ASYNC_END)
            args = {"id": item.name} if item.what == "async" else None
            timed.append((item.start, order, [begin, item.name, item.start, item.start, args]))
            if item.end is not None:
                ended = {"id": item.name} if item.what == "async" else None
                timed.append((item.end, order, [end, item.name, item.end, item.end, ended]))
    return [record for _, _, record in sorted(timed, key=lambda t: (t[0], t[1]))]


def stored(items: list[Item], frame_sizes: list[int], pad: int = 8000) -> SnapshotView:
    """A store of small segments holding the items in EVENTS frames of these many records each (the last takes the
    rest), each event padded with ``pad`` bytes of args so that segments fill up: pairs and spans cross them."""
    store = Store(2**30, MIN_SEGMENT_BYTES)
    client = Client(store, 1, tracks=1)
    recs = records(items)
    for record in recs:
        record[4] = {**(record[4] or {}), "pad": "x" * pad}
    position = 0
    for size in [*frame_sizes, len(recs)]:
        part = recs[position : position + size]
        position += len(part)
        if not part:
            break
        batch = client.encoder.encode(client.tracks[0], [value for record in part for value in record])
        for frame in [*batch.control, *(starts_only(frame) for frame, _ in batch.events)]:
            client.feed(frame)
        store.commit(client.stream)
    processes = {1: ProcessView(1, 101, 101, "host", "proc-1", 0, Stats(0, 0), {})}
    return SnapshotView(store.snapshot(), processes, store.track_counts(), limits=Limits(), origin_ns=BASE_NS - 10**9)


def starts_only(frame: bytes) -> bytes:
    """The EVENTS frame with its header's ``last_ts`` its last start, not its last end (this client's encoder writes
    the end; the protocol leaves it to the writer): the index then bounds no span, and the reach must."""
    events = Events.decode_body(frame[FRAME_HEADER.size :])
    starts = msgpack.unpackb(events.payload, raw=False, strict_map_key=False)[2]
    last = events.first_ts_ns + max(starts)
    return encode(Events(events.track_id, events.count, events.first_ts_ns, last, events.payload), 2**24)


def inside(since: int | None, until: int | None, start: int, dur: int = 0) -> bool:
    """The reference rule, written out: overlap for what lasts, half-open for points."""
    after = since is None or start >= since or start + dur > since
    return after and (until is None or start < until)


def expected(items: list[Item], since: int | None, until: int | None) -> Counter[tuple[Any, ...]]:
    """What a snapshot of the window shows, brute force: (phase, name, start ns, end ns or None)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for item in items:
        if item.what == "span":
            assert item.end is not None
            if inside(since, until, item.start, item.end - item.start):
                out["X", item.name, item.start, item.end] += 1
        elif item.what == "instant":
            if inside(since, until, item.start):
                out["i", item.name, item.start, item.start] += 1
        elif item.end is None:  # open-ended: shown when it began before ``until``
            if until is None or item.start < until:
                out["B" if item.what == "marker" else "b", item.name, item.start, None] += 1
        elif inside(since, until, item.start, item.end - item.start):
            if item.what == "marker":
                out["X", item.name, item.start, item.end] += 1
            else:
                out["b", item.name, item.start, None] += 1
                out["e", item.name, item.end, None] += 1
    return out


def chrome_shown(view: SnapshotView, selected: EventFilter, accelerated: bool) -> Counter[tuple[Any, ...]]:
    doc = json.loads(b"".join(chrome_trace_chunks(view, selected, accelerated=accelerated)))
    assert doc["otherData"]["unmatched_marker_ends"] == 0
    offset = next((p.clock_offset_ns for p in view.processes.values()), 0)
    out: Counter[tuple[Any, ...]] = Counter()
    for event in doc["traceEvents"]:
        if event["ph"] == "M":
            continue
        start = round(event["ts"] * 1000) + view.origin_ns - offset
        if event["ph"] == "X":
            out["X", event["name"], start, start + round(event["dur"] * 1000)] += 1
        elif event["ph"] == "i":
            out["i", event["name"], start, start] += 1
        else:
            out[event["ph"], event["name"], start, None] += 1
    return out


def timeline_shown(view: SnapshotView, selected: EventFilter, accelerated: bool) -> Counter[tuple[Any, ...]]:
    doc = json.loads(b"".join(timeline_chunks(view, selected, accelerated=accelerated)))
    offset = next((p.clock_offset_ns for p in view.processes.values()), 0)
    out: Counter[tuple[Any, ...]] = Counter()
    for block in doc["blocks"]:
        for i, phase in enumerate(block["ph"]):
            name = doc["names"][block["name"][i]]
            start = block["ts"][i] + doc["origin_ns"] - offset
            if phase == "X":
                out["X", name, start, start + block["dur"][i]] += 1
            elif phase == "i":
                out["i", name, start, start] += 1
            else:
                out[phase, name, start, None] += 1
    return out


def perfetto_starts(view: SnapshotView, selected: EventFilter, accelerated: bool) -> Counter[tuple[str, int]]:
    """(name, start) of every slice and instant a viewer makes of the Perfetto trace."""
    trace = PerfettoTrace(b"".join(perfetto_chunks(view, selected, accelerated=accelerated)))
    offset = next((p.clock_offset_ns for p in view.processes.values()), 0)
    out: Counter[tuple[str, int]] = Counter()
    for piece in trace.slices:
        out[piece.name, piece.start_ns - offset] += 1
    for instant in trace.instants:
        out[instant.name, instant.ts_ns - offset] += 1
    return out


def native_shown(view: SnapshotView, selected: EventFilter, tmp_path: Path) -> Counter[tuple[Any, ...]]:
    """What a snapshot file of the window holds, as its own Chrome snapshot shows it."""
    path = tmp_path / "native.rttrace"
    path.write_bytes(b"".join(native_chunks(view, selected)))
    again = load_file(path).view
    return chrome_shown(again, EventFilter(), accelerated=True)


def check_every_format(
    view: SnapshotView, items: list[Item], since: int | None, until: int | None, tmp: Path, family: str | None = None
) -> None:
    """Every format against the reference; ``family``: only the items whose names start so (a ``name`` filter)."""
    offset = next((p.clock_offset_ns for p in view.processes.values()), 0)
    selected = EventFilter(
        since_ns=None if since is None else since + offset,
        until_ns=None if until is None else until + offset,
        name=None if family is None else Pattern(f"{family}*"),
    )
    want = expected([item for item in items if family is None or item.name.startswith(family)], since, until)
    for accelerated in (True, False):
        assert chrome_shown(view, selected, accelerated) == want, ("chrome", accelerated)
        assert timeline_shown(view, selected, accelerated) == want, ("timeline", accelerated)
    starts = Counter((name, start) for phase, name, start, _ in want.elements() if phase != "e")
    for accelerated in (True, False):
        assert perfetto_starts(view, selected, accelerated) == starts, ("perfetto", accelerated)
    # A snapshot file keeps the spans and points of the window exactly, and every pair that overlaps it whole (with
    # the other paired events of the frames it read: a reader pairs them).
    native = native_shown(view, selected, tmp)
    lasting = Counter({key: n for key, n in want.items() if key[0] in ("X", "i") and key[1][0] in "si"})
    assert Counter({key: n for key, n in native.items() if key[0] in ("X", "i") and key[1][0] in "si"}) == lasting
    assert not Counter({key: n for key, n in want.items() if key[1][0] in "ma"}) - native
    # The rows a reader takes (a live tail's too): spans by overlap, every other event as a point of its own.
    rows = Counter((row.name, row.wall_ns - offset) for row in selected_rows(view, selected) if row.name[0] in "si")
    assert rows == Counter((key[1], key[2]) for key in lasting.elements())


def test_every_edge_of_the_window_in_every_format(tmp_path: Path) -> None:
    us = US
    items = [
        Item("span", "s-before-ends-inside", BASE_NS, BASE_NS + 15 * us),
        Item("span", "s-before-ends-on-since", BASE_NS + us, BASE_NS + 10 * us),
        Item("span", "s-before-ends-after", BASE_NS + 2 * us, BASE_NS + 30 * us),
        Item("span", "s-inside-ends-after", BASE_NS + 15 * us, BASE_NS + 25 * us),
        Item("span", "s-on-until", BASE_NS + 20 * us, BASE_NS + 21 * us),
        Item("span", "s-empty-on-since", BASE_NS + 10 * us, BASE_NS + 10 * us),
        Item("instant", "i-on-since", BASE_NS + 10 * us, None),
        Item("instant", "i-on-until", BASE_NS + 20 * us, None),
        Item("instant", "i-before", BASE_NS + 9 * us, None),
        Item("marker", "m-across-since", BASE_NS + 3 * us, BASE_NS + 12 * us),
        Item("marker", "m-across-until", BASE_NS + 18 * us, BASE_NS + 40 * us),
        Item("marker", "m-before", BASE_NS + 4 * us, BASE_NS + 10 * us),
        Item("marker", "m-open-before", BASE_NS + 5 * us, None),
        Item("marker", "m-open-after", BASE_NS + 20 * us, None),
        Item("async", "a-across-since", BASE_NS + 6 * us, BASE_NS + 11 * us),
        Item("async", "a-across-both", BASE_NS + 7 * us, BASE_NS + 50 * us),
        Item("async", "a-before", BASE_NS + 8 * us, BASE_NS + 9 * us),
        Item("async", "a-open-before", BASE_NS + 8 * us, None),
        Item("async", "a-after", BASE_NS + 20 * us, BASE_NS + 22 * us),
    ]
    view = stored(items, [3, 4, 5, 2, 6])
    since, until = BASE_NS + 10 * us, BASE_NS + 20 * us
    want = expected(items, since, until)
    assert {key[1] for key in want} == {
        "s-before-ends-inside",
        "s-before-ends-after",
        "s-inside-ends-after",
        "s-empty-on-since",
        "i-on-since",
        "m-across-since",
        "m-across-until",
        "m-open-before",
        "a-across-since",
        "a-across-both",
        "a-open-before",
    }
    check_every_format(view, items, since, until, tmp_path)
    check_every_format(view, items, since, None, tmp_path)
    check_every_format(view, items, None, until, tmp_path)


#: Items, frame sizes, since, until, and a name family to filter by.
Drawn = tuple[list[Item], list[int], int | None, int | None, str | None]


@st.composite
def stores(draw: st.DrawFn) -> Drawn:
    count = draw(st.integers(1, 24))
    items = []
    for index in range(count):
        what = draw(st.sampled_from(["span", "instant", "marker", "async"]))
        start = BASE_NS + draw(st.integers(0, 60)) * US
        length = draw(st.integers(0, 40)) * US
        ended = what in ("span", "instant") or draw(st.booleans())
        end = None if what == "instant" or not ended else start + length
        items.append(Item(what, f"{what[0]}{index}", start, end, early=draw(st.booleans())))
    frame_sizes = draw(st.lists(st.integers(1, 6), max_size=8))
    edge = st.one_of(st.none(), st.integers(-5, 110).map(lambda t: BASE_NS + t * US))
    since, until = draw(edge), draw(edge)
    family = draw(st.sampled_from([None, None, "s", "i", "m", "a"]))
    return items, frame_sizes, since, until, family


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stores())
def test_every_format_shows_what_a_brute_force_reference_shows(tmp_path: Path, drawn: Drawn) -> None:
    """Windows at every time around what is stored, alone or with a name filter (which the C writers leave to the
    Python walk), over stores whose frames and segments each end anywhere."""
    items, frame_sizes, since, until, family = drawn
    view = stored(items, frame_sizes)
    check_every_format(view, items, since, until, tmp_path, family)


@pytest.mark.parametrize("long_span", [True, False])
def test_a_long_span_in_an_old_segment_is_found_and_other_old_segments_are_not_read(
    tmp_path: Path, long_span: bool
) -> None:
    """Many segments of short spans, the oldest with one span that reaches into the window: that segment is read for
    it, the others before the window are not decoded (their reach, measured once, keeps them out)."""
    items = [Item("span", f"s{i}", BASE_NS + i * US, BASE_NS + i * US + 10) for i in range(6000)]
    if long_span:
        items.append(Item("span", "long", BASE_NS, BASE_NS + 10**6 * US, early=True))
    view = stored(items, [200] * 40, pad=100)
    assert len(view.frames.segments) > 3
    since = BASE_NS + 5990 * US
    offset = next((p.clock_offset_ns for p in view.processes.values()), 0)
    doc = json.loads(b"".join(chrome_trace_chunks(view, EventFilter(since_ns=since + offset))))
    names = {event["name"] for event in doc["traceEvents"] if event["ph"] == "X"}
    assert names == {f"s{i}" for i in range(5990, 6000)} | ({"long"} if long_span else set())
    walk = FrameWalk(view, Selection(EventFilter(since_ns=since + offset)))
    read = [segment.seq for _, segment in walk.segments()]
    newest = view.frames.segments[-1].seq
    assert read == ([view.frames.segments[0].seq, newest] if long_span else [newest])
    cached = [segment.reach.value for segment in view.frames.segments]
    assert all(value is not None for value in cached[:-1])  # measured once, kept with each segment
