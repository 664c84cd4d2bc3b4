"""The recording model on a timeline: counters, markers, sources and async slices, as a memory listener sees them."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ringtrace.client import DecodedEvent, MemoryListener, Timeline


@pytest.fixture
def listener() -> MemoryListener:
    return MemoryListener()


@pytest.fixture
def tl(listener: MemoryListener) -> Iterator[Timeline]:
    timeline = Timeline("model", [listener])
    yield timeline
    timeline.close()


def flushed(tl: Timeline, listener: MemoryListener) -> list[DecodedEvent]:
    tl.flush()
    return listener.events


def kinds(events: list[DecodedEvent]) -> list[tuple[str, str, Any]]:
    return [(e.kind, e.name, e.args) for e in events]


def test_counters_take_numbers_and_drop_anything_else_counted(tl: Timeline, listener: MemoryListener) -> None:
    tl.counter("depth", 3)
    tl.counter("depth", 2.5)
    tl.counter("depth", "4")  # type: ignore[arg-type]  # text a float() can read
    tl.counter("depth", object())  # type: ignore[arg-type]
    assert not tl.flush()  # one dropped since the last flush
    assert kinds(listener.events) == [("counter", "depth", {"value": v}) for v in (3, 2.5, 4.0)]
    assert listener.dropped_events == 1


def test_markers_start_end_instant_with_details_time_and_stack(tl: Timeline, listener: MemoryListener) -> None:
    before = time.monotonic_ns()
    tl.marker("load", "start", url="a")
    tl.marker("load", "end")
    tl.marker("late", ts_ns=before - 5)
    tl.marker("where", stack=True)
    with pytest.raises(ValueError), tl.marker_scope("failing", n=1):
        raise ValueError
    events = flushed(tl, listener)
    assert kinds(events[:3]) == [
        ("marker_start", "load", {"url": "a"}),
        ("marker_end", "load", None),
        ("marker", "late", None),
    ]
    assert events[2].ts_ns == before - 5
    assert "test_markers_start_end_instant" in events[3].args["stack"]
    assert kinds(events[4:]) == [
        ("marker_start", "failing", {"n": 1}),
        ("marker_end", "failing", {"exception": "ValueError"}),
    ]


def test_a_bad_marker_phase_or_time_is_dropped_and_counted_not_raised(tl: Timeline, listener: MemoryListener) -> None:
    tl.marker("x", "middle")
    tl.marker("x", ts_ns=1.5)  # type: ignore[arg-type]
    tl.marker("ok")
    assert not tl.flush()
    assert [e.name for e in listener.events] == ["ok"] and listener.dropped_events == 2


def test_an_unobserved_timeline_keeps_no_markers() -> None:
    tl = Timeline("unobserved")
    tl.marker("nobody", "start")
    listener = MemoryListener()
    tl.add_listener(listener)
    tl.marker("seen")
    assert tl.flush()
    assert [e.name for e in listener.events] == ["seen"]
    tl.close()


def test_a_source_is_one_track_opened_and_closed_from_any_thread(tl: Timeline, listener: MemoryListener) -> None:
    gpu = tl.source("GPU queue")
    gpu.open()
    closer = threading.Thread(target=gpu.close)
    closer.start()
    closer.join()
    with gpu:
        pass
    events = flushed(tl, listener)
    assert [e.kind for e in events] == ["source_open", "source_close", "source_open", "source_close"]
    assert {e.track for e in events} == {gpu.track} and gpu.track.name == "GPU queue"


def test_a_source_records_only_while_the_timeline_has_listeners_and_again_after(listener: MemoryListener) -> None:
    tl = Timeline("sources", [listener])
    src = tl.source("disk")
    src.open()
    tl.remove_listener(listener)
    src.close()  # nothing listens: kept nowhere
    again = MemoryListener()
    tl.add_listener(again)
    src.open()
    assert tl.flush()
    assert [e.kind for e in listener.events] == ["source_open"]
    assert [e.kind for e in again.events] == ["source_open"]
    tl.close()


def test_a_source_nobody_holds_is_retired_once_drained(tl: Timeline, listener: MemoryListener) -> None:
    src = tl.source("short-lived")
    src.open()
    track = src.track
    del src
    gc.collect()
    assert tl.flush()
    assert [e.kind for e in listener.events] == ["source_open"]
    assert track not in tl.tracks()


def test_async_slices_carry_their_id_across_threads(tl: Timeline, listener: MemoryListener) -> None:
    tl.async_begin("request", 7, path="/a")
    ender = threading.Thread(target=tl.async_end, args=("request", 7))
    ender.start()
    ender.join()
    begin, end = flushed(tl, listener)
    assert (begin.kind, begin.args, end.kind, end.args) == (
        "async_begin",
        {"path": "/a", "id": 7},
        "async_end",
        {"id": 7},
    )
    assert begin.track != end.track


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_records_sources_and_markers_into_its_own_buffers(listener: MemoryListener) -> None:
    tl = Timeline("fork", [listener])
    src = tl.source("io")
    src.open()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child keeps its own events in its copy of the memory listener, not the parent's
        try:
            src.close()
            tl.marker("child")
            tl.counter("c", 1)
            tl.flush()
            os.write(write, " ".join(e.kind for e in listener.events).encode())
        finally:
            os._exit(0)
    os.close(write)
    child_kinds = os.read(read, 1000)
    os.waitpid(pid, 0)
    assert child_kinds == b"source_close marker counter"
    src.close()
    assert tl.flush()
    assert [e.kind for e in listener.events] == ["source_open", "source_close"]
    tl.close()
