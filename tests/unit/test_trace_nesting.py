"""``?trace_id=`` selects a request's inner work (``read/trace_spans.py``): besides the events that carry the trace
id, those nested in time in one of its spans on the same track (a thread, an asyncio task's lane), in every format;
not the same times on another track or in another process."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from perfetto_model import PerfettoTrace
from ringtrace.client import FileListener, Timeline
from ringtrace.collector.export.chrome import chrome_trace_chunks
from ringtrace.collector.export.native import native_chunks
from ringtrace.collector.export.perfetto import perfetto_chunks
from ringtrace.collector.export.timeline_columns import timeline_chunks
from ringtrace.collector.foreign.offline import load_file
from ringtrace.collector.read.event_walk import EventWalk
from ringtrace.collector.read.frame_walk import SnapshotView
from ringtrace.collector.read.rows import selected_rows
from ringtrace.collector.read.selection import EventFilter, Pattern
from ringtrace.collector.read.trace_spans import TraceSpans
from ringtrace.wire.arg_values import normalise_values
from ringtrace.wire.frames import encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.model import ASYNC_TRACK, INSTANT, SPAN, THREAD_TRACK, KindRegistry, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c"
T0 = 10**18


def chrome_names(view: SnapshotView, selected: EventFilter, accelerated: bool = True) -> list[str]:
    document = json.loads(b"".join(chrome_trace_chunks(view, selected, accelerated=accelerated)))
    return sorted(event["name"] for event in document["traceEvents"] if event["ph"] != "M")


def perfetto_names(view: SnapshotView, selected: EventFilter, accelerated: bool = True) -> list[str]:
    trace = PerfettoTrace(b"".join(perfetto_chunks(view, selected, accelerated=accelerated)))
    return sorted([s.name for s in trace.slices] + [i.name for i in trace.instants])


def timeline_names(view: SnapshotView, selected: EventFilter, accelerated: bool = True) -> list[str]:
    document = json.loads(b"".join(timeline_chunks(view, selected, accelerated=accelerated)))
    return sorted(document["names"][index] for block in document["blocks"] for index in block["name"])


def dump_names(view: SnapshotView, selected: EventFilter) -> list[str]:
    return sorted(row.name for row in selected_rows(view, selected))


def native_names(view: SnapshotView, selected: EventFilter, tmp_path: Path) -> list[str]:
    """The snapshot file's events, read back whole."""
    path = tmp_path / "selected.rttrace"
    path.write_bytes(b"".join(native_chunks(view, selected)))
    return dump_names(load_file(path).view, EventFilter())


def selected_names(view: SnapshotView, trace_id: str, tmp_path: Path) -> list[str]:
    """The names of the events ``?trace_id=`` selects, the same in every format (and writer) or the test fails."""
    selected = EventFilter(trace_id=trace_id)
    names = chrome_names(view, selected)
    assert chrome_names(view, selected, accelerated=False) == names
    assert perfetto_names(view, selected) == perfetto_names(view, selected, accelerated=False) == names
    assert timeline_names(view, selected) == timeline_names(view, selected, accelerated=False) == names
    assert dump_names(view, selected) == names
    assert native_names(view, selected, tmp_path) == names
    return names


# A stream built event by event, at times given to the ns: the bounds of nesting.


#: The kinds of the streams built here: the built-in ones and one message, in a registry of their own (the
#: process's grows with every kind other tests define, past what a stream declares).
REGISTRY = KindRegistry()
NOTE = REGISTRY.register("app", "message", (), normalise_values, "note inside", "info")


def stream(pid: int, name: str, tracks: dict[TrackInfo, list[list[Any]]]) -> bytes:
    """One process's stream: each track's events (``[kind, name, start_ns, end_ns, args]``), a frame each."""
    encoder = StreamEncoder(registry=REGISTRY)
    frames = [preamble(), encode(Hello(pid, "host", name, f"i{pid}", "boot", 1, 2, "test")), *encoder.prefix()]
    for track, events in tracks.items():
        batch = encoder.encode(track, [value for event in events for value in event])
        frames += [*batch.control, *(frame for frame, _ in batch.events)]
    return b"".join(frames)


def span(name: str, start: int, end: int, **args: Any) -> list[Any]:
    return [SPAN, name, T0 + start, T0 + end, args or None]


def instant(name: str, at: int) -> list[Any]:
    return [INSTANT, name, T0 + at, T0 + at, None]


def note(at: int) -> list[Any]:
    return [NOTE.id, NOTE.name, T0 + at, T0 + at, []]


def of_trace(span_id: str, kind: str = "server") -> dict[str, str]:
    return {"trace_id": TRACE, "span_id": span_id, "kind": kind}


MAIN = TrackInfo(1, THREAD_TRACK, "main", 100)
WORKER = TrackInfo(2, THREAD_TRACK, "worker", 101)
LANE = TrackInfo(3, ASYNC_TRACK, "task 7", 100, parent=1)


def test_events_nested_in_a_span_of_the_trace_on_its_track_are_selected_to_the_ns(tmp_path: Path) -> None:
    server = {
        MAIN: [
            span("before", 0, 99),
            instant("at its start", 100),
            span("inner", 100, 150),
            span("innermost", 110, 120),
            instant("inside", 130),
            note(140),
            span("to its end", 160, 200),
            instant("at its end", 200),
            span("handle", 100, 200, **of_trace("00f067aa0ba902b7")),
            span("straddles its end", 190, 210),
            instant("just after", 201),
            span("straddles its start", 90, 110),
        ],
        WORKER: [span("same times, another thread", 100, 200), instant("another thread", 150), note(150)],
        LANE: [span("same times, a task's lane of the thread", 100, 200), instant("a task's lane", 150)],
    }
    # Another process: its main track has the same id as the server's and the same times.
    other = {MAIN: [span("same times, another process", 100, 200), instant("another process", 150)]}
    path = tmp_path / "two.rttrace"
    path.write_bytes(stream(1, "server", server) + stream(2, "other", other))
    view = load_file(path).view
    assert selected_names(view, TRACE, tmp_path) == sorted(
        ["at its end", "at its start", "handle", "inner", "innermost", "inside", "note inside", "to its end"]
    )
    assert selected_names(view, OTHER_TRACE, tmp_path) == []


def test_a_span_of_the_trace_that_began_before_since_still_holds_what_is_after_it(tmp_path: Path) -> None:
    path = tmp_path / "one.rttrace"
    path.write_bytes(
        stream(
            1,
            "server",
            {MAIN: [instant("early", 110), instant("late", 150), span("handle", 100, 200, **of_trace("1" * 16))]},
        )
    )
    view = load_file(path).view
    since = EventFilter(trace_id=TRACE, since_ns=T0 + 140)
    assert chrome_names(view, since) == ["handle", "late"]  # (the span itself starts before: it overlaps the window)
    assert chrome_names(view, EventFilter(trace_id=TRACE, limit=2)) == ["early", "late"]  # the newest two


def test_the_latest_end_among_the_spans_begun_tells_whether_one_holds_an_event() -> None:
    """Spans of a trace on a track (nested, apart): an event within one of them is held, one across a gap is not."""
    spans = TraceSpans(TRACE)
    for start, end in [(300, 400), (100, 200), (120, 130)]:
        spans.add((1, 1), start, end)
    spans.done()
    held = [(100, 200), (125, 200), (200, 200), (300, 300), (350, 400)]
    apart = [(99, 100), (150, 201), (201, 201), (250, 299), (200, 300), (401, 401)]
    assert all(spans.holds((1, 1), start, end) for start, end in held)
    assert not any(spans.holds((1, 1), start, end) for start, end in apart)
    assert not spans.holds((1, 2), 150, 150) and not spans.holds((2, 1), 150, 150)
    assert spans.may_hold((1, 1), 0, 100) and spans.may_hold((1, 1), 250, 300) and spans.may_hold((1, 1), 400, 500)
    assert not spans.may_hold((1, 1), 201, 299) and not spans.may_hold((1, 1), 0, 99)


# Recorded by the client, as a program records it.


def recorded(tmp_path: Path, record: Callable[[Timeline, Timeline], None]) -> SnapshotView:
    """What ``record`` records on a timeline of process "server" and one of process "other", read into one store."""
    paths = [tmp_path / "server.rttrace", tmp_path / "other.rttrace"]
    server, other = (Timeline("unit", [FileListener(path, process_name=path.stem)]) for path in paths)
    record(server, other)
    server.close()
    other.close()
    both = tmp_path / "both.rttrace"
    both.write_bytes(paths[0].read_bytes() + paths[1].read_bytes())
    return load_file(both).view


def test_a_request_s_plain_scopes_instants_and_markers_are_selected_not_other_threads_or_processes(
    tmp_path: Path,
) -> None:
    trace_ids = []

    def record(tl: Timeline, other: Timeline) -> None:
        in_span, recorded_there = threading.Event(), threading.Event()

        def another_thread() -> None:
            assert in_span.wait(30)
            with tl.scope("another thread"):
                tl.instant("another thread's instant")
            recorded_there.set()

        thread = threading.Thread(target=another_thread)
        thread.start()
        with tl.scope("before"):
            pass
        with tl.server_span("handle", {}) as handle:
            with tl.scope("inner"):
                tl.instant("inner instant")
                tl.marker("marker inside")
            with other.scope("another process"):  # the same thread and times, another process
                other.instant("another process's instant")
            in_span.set()
            assert recorded_there.wait(30)
        thread.join()
        tl.instant("after")
        assert handle.context is not None
        trace_ids.append(handle.context.trace_id)

    view = recorded(tmp_path, record)
    names = selected_names(view, trace_ids[0], tmp_path)
    assert names == sorted(["handle", "inner", "inner instant", "marker inside"])


def test_two_concurrent_requests_of_one_event_loop_each_select_their_own_task_s_inner_spans(tmp_path: Path) -> None:
    trace_ids: dict[str, str] = {}

    def record(tl: Timeline, _: Timeline) -> None:
        async def request(who: str, both_inside: asyncio.Barrier) -> None:
            with tl.server_span(f"handle {who}", {}) as handle:
                with tl.scope(f"inner {who}"):
                    tl.instant(f"step {who}")
                    await both_inside.wait()  # the other request is inside its inner scope too
                    with tl.scope(f"innermost {who}"):
                        await asyncio.sleep(0)
                await both_inside.wait()
                tl.instant(f"done {who}")
            assert handle.context is not None
            trace_ids[who] = handle.context.trace_id

        async def both() -> None:
            barrier = asyncio.Barrier(2)
            await asyncio.gather(request("a", barrier), request("b", barrier))

        asyncio.run(both())

    view = recorded(tmp_path, record)
    for who in ("a", "b"):
        expected = [f"{name} {who}" for name in ("done", "handle", "inner", "innermost", "step")]
        assert selected_names(view, trace_ids[who], tmp_path) == expected


@pytest.mark.parametrize("category", ["span", "instant"])
def test_other_filters_apply_to_the_nested_events_too(tmp_path: Path, category: str) -> None:
    path = tmp_path / "one.rttrace"
    path.write_bytes(
        stream(1, "server", {MAIN: [instant("inside", 150), span("handle", 100, 200, **of_trace("1" * 16))]})
    )
    view = load_file(path).view
    names = chrome_names(view, EventFilter(trace_id=TRACE, category=Pattern(category)))
    assert names == (["handle"] if category == "span" else ["inside"])


def test_frames_a_span_of_the_trace_holds_whole_are_taken_by_start_time_and_the_writers_agree(tmp_path: Path) -> None:
    """A job's span holding every other event: each frame it holds whole is selected by its events' start alone, as
    the C writers write it (the same document as the Python writers'); a frame that reaches past it is not."""
    job: list[str] = []

    def record(tl: Timeline, _: Timeline) -> None:
        with tl.trace_scope("job") as scope:
            for i in range(1500):
                with tl.scope("step", i=i):
                    tl.instant("tick")
                if i % 500 == 499:
                    tl.flush(timeout_s=30)  # frames apart
        tl.instant("after the job")
        assert scope.context is not None
        job.append(scope.context.trace_id)

    view = recorded(tmp_path, record)
    selected = EventFilter(trace_id=job[0])
    walk = EventWalk(view, selected)
    whole = [walk.takes_whole(process, track, frame) for (process, track, _, frame), _ in walk.walked()]
    assert whole.count(True) >= 3 and not all(whole)  # (the last frame holds the instant after the job)
    outside = [
        walk.takes_whole(p, t, f) for (p, t, _, f), _ in EventWalk(view, EventFilter(trace_id=OTHER_TRACE)).walked()
    ]
    assert not any(outside)
    names = selected_names(view, job[0], tmp_path)
    assert len(names) == 1 + 2 * 1500 and "after the job" not in names
    for chunks in (chrome_trace_chunks, perfetto_chunks, timeline_chunks):
        assert b"".join(chunks(view, selected)) == b"".join(chunks(view, selected, accelerated=False))
