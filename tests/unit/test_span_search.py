"""Span search and aggregates (``read/span_search.py``, ``read/span_aggregates.py``) against a brute-force reference
computed from a Chrome snapshot of the same store and filter: Hypothesis draws the stores (spans, instants, markers
paired into slices, async slices paired by id, args with and without errors) and the queries. What the snapshot shows
open-ended (``B``, or a ``b`` with no ``e``) is an open span running to the window's end or the time given."""

from __future__ import annotations

import json
import math
from array import array
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recorded_files import recorded
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read import span_aggregates
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Pattern
from ringtrace.collector.read.span_aggregates import aggregate_spans, nearest_rank, summed_up
from ringtrace.collector.read.span_search import search_spans
from ringtrace.collector.read.span_walk import SpanFilter, arg_text, has_error
from ringtrace.wire.call_records import CallRun, pack_records
from ringtrace.wire.frames import encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import (
    ASYNC_BEGIN,
    ASYNC_END,
    CALL,
    CALL_RAISED,
    INSTANT,
    MARKER_END,
    MARKER_START,
    SPAN,
    THREAD_TRACK,
    KindRegistry,
    TrackInfo,
)
from ringtrace.wire.stream_encoder import StreamEncoder

T0 = 1_800_000_000 * 10**9
TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACKS = [TrackInfo(1, THREAD_TRACK, "main", 11), TrackInfo(2, THREAD_TRACK, "worker", 12)]
ARGS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"k": st.integers(0, 3)}),
    st.fixed_dictionaries({"error": st.sampled_from(["boom", "", None, False, True])}),
    st.fixed_dictionaries({"status": st.sampled_from(["error", "ok"]), "k": st.sampled_from(["1", "x"])}),
    st.fixed_dictionaries({"trace_id": st.just(TRACE)}),
)
EVENT = st.one_of(
    st.tuples(
        st.sampled_from([SPAN, SPAN, SPAN, INSTANT, MARKER_START, MARKER_END]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 10**6),
        st.sampled_from([0, 1, 5, 10**3, 10**4, 77_777, 10**6]),
        ARGS,
    ),
    st.tuples(
        st.sampled_from([ASYNC_BEGIN, ASYNC_END]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 10**6),
        st.just(0),
        st.fixed_dictionaries({"id": st.integers(0, 2)}, optional={"k": st.sampled_from(["1", "x"])}),
    ),
)
#: The time a search is made at, for spans still open (beyond every drawn event).
NOW = T0 + 2 * 10**6


def stored(tmp_path: Path, tracks: list[list[tuple[int, str, int, int, Any]]]) -> SnapshotView:
    """A file of one stream: each track's events, in frames of up to 8 (so that pairing crosses frames)."""
    encoder = StreamEncoder(max_events_per_frame=8, registry=KindRegistry())
    frames = [preamble(), encode(Hello(1, "host", "searched", "i1", "boot", 1, 2, "test")), *encoder.prefix()]
    for track, events in zip(TRACKS, tracks, strict=False):
        records: list[Any] = []
        for kind, name, start, dur, args in events:
            ts = T0 + start
            records += [kind, name, ts, ts + (dur if kind == SPAN else 0), args]
        if records:
            batch = encoder.encode(track, records)
            frames += [*batch.control, *(frame for frame, _ in batch.events)]
    path = tmp_path / "searched.rttrace"
    path.write_bytes(b"".join(frames))
    return load_file(path).view


def chrome(view: SnapshotView, selected: EventFilter) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The Chrome snapshot's events (``ts`` and ``dur`` as wall-clock ns) and its ``otherData``."""
    document = json.loads(b"".join(chrome_trace_chunks(view, selected)), parse_float=Decimal)
    origin = document["otherData"]["clock_origin_wall_ns"]
    events = []
    for event in document["traceEvents"]:
        if event["ph"] in ("X", "i", "B", "b", "e"):
            start = origin + round(Decimal(event["ts"]) * 1000)
            dur = round(Decimal(event.get("dur", 0)) * 1000)
            events.append({**event, "start_ns": start, "duration_ns": dur})
    return events, document["otherData"]


def reference_spans(
    view: SnapshotView, selected: EventFilter, spans: SpanFilter
) -> list[tuple[str, int, int, str, bool]]:
    """(name, start, duration, args as JSON, open) of every span the Chrome snapshot shows that ``spans`` takes: its
    complete slices, its async begins paired with the next end of their id in time (args of both), and what it shows
    open-ended, running to the window's end or ``NOW``."""
    events, _ = chrome(view, selected)
    end = NOW if selected.until_ns is None else min(selected.until_ns, NOW)
    found: list[tuple[str, int, int, dict[str, Any] | None, bool]] = []
    begun: dict[tuple[int, str], list[dict[str, Any]]] = {}
    slices: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for event in events:
        args = json.loads(json.dumps(event.get("args", {}), default=float)) or None
        if event["ph"] == "X":
            found.append((event["name"], event["start_ns"], event["duration_ns"], args, False))
        elif event["ph"] == "B":
            args = {key: value for key, value in (args or {}).items() if key != "ringtrace"} or None
            found.append((event["name"], event["start_ns"], max(end - event["start_ns"], 0), args, True))
        elif event["ph"] in "be":
            slices.setdefault((event["pid"], event["id"]), []).append({**event, "args": args})
    for ends in slices.values():  # paired in time order, as viewers pair them (not the order their frames came in)
        for event in sorted(ends, key=lambda event: event["start_ns"]):
            begins = begun.setdefault((event["pid"], event["id"]), [])
            if event["ph"] == "b":
                begins.append(event)
            elif begins:
                begin = begins.pop()
                both = {**(begin["args"] or {}), **(event["args"] or {})} or None
                found.append((begin["name"], begin["start_ns"], event["start_ns"] - begin["start_ns"], both, False))
    for begins in begun.values():
        found += [(b["name"], b["start_ns"], max(end - b["start_ns"], 0), b["args"], True) for b in begins]
    low, high = spans.min_duration_ns or 0, spans.max_duration_ns
    return [
        (name, start, duration, json.dumps(args or {}, sort_keys=True), is_open)
        for name, start, duration, args, is_open in found
        if spans.takes(args) and low <= duration and (high is None or duration <= high)
    ]


FILTERS = st.fixed_dictionaries(
    {
        "name": st.sampled_from([None, None, "a", "[ab]"]),
        "since": st.sampled_from([None, None, T0 + 300_000]),
        "until": st.sampled_from([None, None, T0 + 700_000]),
        "track": st.sampled_from([None, None, None, "worker"]),
        "trace_id": st.sampled_from([None, None, None, TRACE]),
    }
)
SPAN_FILTERS = st.builds(
    SpanFilter,
    min_duration_ns=st.sampled_from([None, None, 1, 10**3, 77_777]),
    max_duration_ns=st.sampled_from([None, None, None, 10**4, 10**6]),
    has_error=st.sampled_from([None, None, None, True, False]),
    args=st.sampled_from([(), (), (), (), (("k", "1"),), (("k", "x"), ("status", "error"))]),
)


def event_filter(drawn: dict[str, Any]) -> EventFilter:
    return EventFilter(
        since_ns=drawn["since"],
        until_ns=drawn["until"],
        name=Pattern(drawn["name"]) if drawn["name"] else None,
        track=Pattern(drawn["track"]) if drawn["track"] else None,
        trace_id=drawn["trace_id"],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tracks=st.lists(st.lists(EVENT, max_size=40), min_size=1, max_size=2),
    drawn=FILTERS,
    spans=SPAN_FILTERS,
    sort=st.sampled_from(["duration", "start"]),
    limit=st.integers(1, 12),
)
def test_search_is_the_top_of_the_chrome_snapshot_s_spans(
    tmp_path_factory: pytest.TempPathFactory,
    tracks: list[list[tuple[int, str, int, int, Any]]],
    drawn: dict[str, Any],
    spans: SpanFilter,
    sort: str,
    limit: int,
) -> None:
    view = stored(tmp_path_factory.mktemp("s"), tracks)
    selected = event_filter(drawn)
    reference = reference_spans(view, selected, spans)
    view = stored(tmp_path_factory.mktemp("s"), tracks)  # (a walk lets go of what it read)
    found = search_spans(view, selected, spans, sort, limit, now_ns=NOW)["spans"]
    got = [
        (s["name"], s["start_ns"], s["duration_ns"], json.dumps(s["args"], sort_keys=True), s["open"]) for s in found
    ]
    assert Counter(got) <= Counter(reference)  # every one is a span of the snapshot
    assert all(s["trace_id"] == s["args"].get("trace_id") and s["process"] == "searched" for s in found)
    order = (lambda s: (s[2], s[1])) if sort == "duration" else (lambda s: (s[1], s[2]))
    assert [order(s) for s in got] == sorted(map(order, reference), reverse=True)[:limit]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tracks=st.lists(st.lists(EVENT, max_size=40), min_size=1, max_size=2),
    drawn=FILTERS,
    spans=SPAN_FILTERS,
    by=st.sampled_from(["name", "process", "name,process"]),
)
def test_aggregates_are_the_chrome_snapshot_s_spans_summed_up(
    tmp_path_factory: pytest.TempPathFactory,
    tracks: list[list[tuple[int, str, int, int, Any]]],
    drawn: dict[str, Any],
    spans: SpanFilter,
    by: str,
) -> None:
    view = stored(tmp_path_factory.mktemp("a"), tracks)
    selected = event_filter(drawn)
    reference = reference_spans(view, selected, spans)
    view = stored(tmp_path_factory.mktemp("a"), tracks)
    events, other = chrome(view, selected)
    view = stored(tmp_path_factory.mktemp("a"), tracks)
    document = aggregate_spans(view, selected, spans, by, now_ns=NOW)
    groups: dict[tuple[str | None, str | None], list[int]] = {}
    still_open: Counter[tuple[str | None, str | None]] = Counter()
    for name, _, duration, _, is_open in reference:
        key = (name if "name" in by else None, "searched" if "process" in by else None)
        groups.setdefault(key, []).append(duration)
        still_open[key] += is_open
    rows = {(row["name"], row["process"]): row for row in document["rows"]}
    assert rows.keys() == groups.keys()
    for key, durations in groups.items():
        durations.sort()
        row = rows[key]
        assert (row["count"], row["total_ns"], row["max_ns"]) == (len(durations), sum(durations), durations[-1])
        assert (row["mean_ns"], row["open"]) == (sum(durations) // len(durations), still_open[key])
        for percent in (50, 90, 99):
            assert row[f"p{percent}_ns"] == durations[math.ceil(percent * len(durations) / 100) - 1]
    totals = [row["total_ns"] for row in document["rows"]]
    assert totals == sorted(totals, reverse=True)
    assert document["instants"] == sum(1 for e in events if e["ph"] == "i")
    assert document["lost"]["unmatched_marker_ends"] == other["unmatched_marker_ends"]


def test_messages_instants_and_markers_are_counted_and_errors_found(tmp_path: Path) -> None:
    def record(tl: Timeline) -> None:
        warn = tl.message("net", "warning", "lost $count packets")
        fatal = tl.message("net", "fatal", "gone $priority")  # (a value of that name: the kind's priority counts)
        for i in range(200):
            with tl.scope("request", i=i, error="bad" if i % 50 == 0 else None):
                tl.instant("tick")
                warn(count=i)
            if i % 100 == 0:
                fatal(7)
                tl.flush(timeout_s=30)
        tl.marker("phase", "start")
        tl.marker("phase", "end")

    view = recorded(tmp_path, record)
    document = aggregate_spans(view, EVERYTHING, SpanFilter())
    assert document["messages"] == {"warning": 200, "fatal": 2}
    assert document["instants"] == 200
    rows = {row["name"]: row for row in document["rows"]}
    assert (rows["request"]["count"], rows["phase"]["count"]) == (200, 1)
    (tmp_path / "second").mkdir()
    view = recorded(tmp_path / "second", record)  # (a walk lets go of what it read)
    found = search_spans(view, EVERYTHING, SpanFilter(has_error=True), limit=10)["spans"]
    assert sorted(span["args"]["i"] for span in found) == [0, 50, 100, 150]
    assert {span["track"] for span in found} == {"unit (MainThread)"}
    assert all(span["process"] == "unit" and span["trace_id"] is None for span in found)


def test_errors_and_arg_values_are_as_documented() -> None:
    assert has_error({"status": "error"}) and has_error({"raised": True}) and has_error({"error": "x"})
    assert not has_error({"error": 0}) and not has_error({"error": ""}) and not has_error({"error": None})
    assert not has_error(None) and not has_error({"status": "ok"}) and not has_error({"error": False})
    assert has_error({"exception": "ValueError"}) and not has_error({"exception": None})
    # An HTTP integration's span: its side's error statuses (OpenTelemetry's HTTP conventions), or a failed request.
    for kind, status, error in [
        ("server", 503, True),
        ("server", 500, True),
        ("server", 404, False),
        ("server", 200, False),
        ("client", 404, True),
        ("client", 500, True),
        ("client", 302, False),
        ("internal", 500, False),
        (None, 500, False),
    ]:
        assert has_error({"kind": kind, "response": {"status": status}}) is error, (kind, status)
    assert has_error({"kind": "client", "response": {"error": "connection refused"}})
    assert not has_error({"kind": "server", "response": {"status": "503"}})  # (a status the integrations never write)
    assert not has_error({"kind": "server", "response": {}}) and not has_error({"kind": "client", "response": None})
    assert [arg_text(v) for v in ("x", 1, 1.5, True, None, [1, 2])] == ["x", "1", "1.5", "true", "null", "[1,2]"]
    assert [nearest_rank([1, 2, 3, 4], p) for p in (1, 25, 50, 51, 99, 100)] == [1, 1, 2, 3, 4, 4]


@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=60), st.integers(1, 7))
def test_percentiles_of_durations_sorted_in_runs_are_those_of_them_all(durations: list[int], run: int) -> None:
    with mock.patch.object(span_aggregates, "_RUN", run):
        row = summed_up("n", None, array("q", durations))
    ordered = sorted(durations)
    assert (row["min_ns"], row["max_ns"], row["total_ns"]) == (ordered[0], ordered[-1], sum(ordered))
    assert [row[f"p{p}_ns"] for p in (50, 90, 99)] == [nearest_rank(ordered, p) for p in (50, 90, 99)]


def test_a_traced_call_shows_its_location_and_one_that_raised_is_in_error(tmp_path: Path) -> None:
    path = tmp_path / "calls.rttrace"
    listener = FileListener(path, process_name="unit")
    locations = [("main", "app.py", 10), ("parse", "parse.py", 3)]
    for i in range(20):
        at = T0 + 1_000 * i
        calls = [(at + 10, at + 500, 1, CALL), (at, at + 900 - i, 0, CALL_RAISED if i == 7 else CALL)]
        listener.receive(TRACKS[0], CallRun(pack_records(calls), locations))
    assert listener.close(timeout_s=30)
    (raised,) = search_spans(load_file(path).view, EVERYTHING, SpanFilter(has_error=True))["spans"]
    assert (raised["name"], raised["duration_ns"]) == ("main", 893)
    assert raised["args"] == {"file": "app.py", "line": 10, "raised": True}
    slowest = search_spans(load_file(path).view, EVERYTHING, SpanFilter(min_duration_ns=899), limit=5)["spans"]
    assert [(s["name"], s["duration_ns"], s["args"]["file"]) for s in slowest] == [
        ("main", 900, "app.py"),
        ("main", 899, "app.py"),
    ]  # (both bounds are included)
    rows = aggregate_spans(load_file(path).view, EVERYTHING, SpanFilter(), "name")["rows"]
    assert [(row["name"], row["count"], row["max_ns"]) for row in rows] == [("main", 20, 900), ("parse", 20, 490)]


def test_a_span_that_began_before_the_window_and_ends_in_it_is_found(tmp_path: Path) -> None:
    """Windows select by overlap (``EventFilter.in_window``), the column-wise reading of spans as the walk."""
    tracks = [[(SPAN, "long", 0, 500_000, None), (SPAN, "inside", 400_000, 10, None), (SPAN, "before", 0, 10, None)]]
    selected = EventFilter(since_ns=T0 + 300_000, until_ns=T0 + 700_000)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    found = search_spans(stored(tmp_path / "a", tracks), selected, SpanFilter(), "duration", 10)["spans"]
    assert [(s["name"], s["duration_ns"]) for s in found] == [("long", 500_000), ("inside", 10)]
    rows = aggregate_spans(stored(tmp_path / "b", tracks), selected, SpanFilter(), "name")["rows"]
    assert sorted((row["name"], row["count"]) for row in rows) == [("inside", 1), ("long", 1)]
