"""Listeners: FileListener and read_trace_file (the file format, torn tails, loss counters), MemoryListener.

Listeners are fed through their public ``receive`` (what the flusher calls) when a test needs to know exactly which
frames a file holds, and through a Timeline otherwise.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from ringtrace.client import (
    ConfigError,
    Event,
    FileListener,
    MemoryListener,
    RingtraceError,
    Timeline,
    TraceFile,
    read_trace_file,
    read_trace_streams,
    u8,
)
from ringtrace.client.delivery import process_identity
from ringtrace.client.delivery.process_identity import ProcessIdentity, rename_instance
from ringtrace.wire.arg_values import MAX_STRING_CHARS, display_text
from ringtrace.wire.frame_types import FRAME_HEADER, PREAMBLE, FrameType
from ringtrace.wire.frames import Stats
from ringtrace.wire.model import INSTANT, SPAN, THREAD_TRACK, TrackInfo, new_track_id


def new_track(name: str = "main") -> TrackInfo:
    return TrackInfo(new_track_id(), THREAD_TRACK, name, 4321)


def records(labels: list[Any], start: int = 0, **args: Any) -> list[Any]:
    """Flat records, as a timeline's drain hands them over: one 10 ns span per label."""
    out: list[Any] = []
    for i, label in enumerate(labels):
        out += [SPAN, label, 1_000 + 100 * (start + i), 1_010 + 100 * (start + i), {**args, "i": start + i}]
    return out


def names(trace: TraceFile) -> list[str]:
    return [event.name for event in trace]


def frame_offsets(data: bytes) -> list[tuple[int, int]]:
    """``(offset, frame type)`` of every frame of a stream, found from the frame headers alone."""
    offsets, at = [], PREAMBLE.size
    while at < len(data):
        body_length, frame_type = FRAME_HEADER.unpack_from(data, at)
        offsets.append((at, frame_type))
        at += FRAME_HEADER.size + body_length
    assert at == len(data)
    return offsets


# -- FileListener and read_trace_file ------------------------------------------------------------------------------


def test_file_written_through_a_timeline_reads_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "trace.rt"
    tl = Timeline("file", [FileListener(path, process_name="writer")])

    def worker() -> None:
        for i in range(50):
            with tl.scope("work", i=i):
                tl.instant("step", i=i)

    threads = [threading.Thread(target=worker, name=f"worker-{n}") for n in range(3)]
    for thread in threads:
        thread.start()
    for i in range(20):
        tl.instant("main", i=i)
    for thread in threads:
        thread.join()
    assert tl.close()

    trace = read_trace_file(path)
    assert trace.error is None
    assert trace.hello is not None
    assert (trace.hello.process_name, trace.hello.pid) == ("writer", os.getpid())
    assert trace.stats == Stats(0, 0, 0, 0)
    assert len(trace.events) == 3 * 100 + 20
    by_thread: dict[str, list[tuple[str, Any]]] = {}
    for event in trace:
        by_thread.setdefault(event.track.name, []).append((event.name, event.args))
    assert set(by_thread) == {f"file ({name})" for name in ("MainThread", "worker-0", "worker-1", "worker-2")}
    assert by_thread["file (MainThread)"] == [("main", {"i": i}) for i in range(20)]
    for n in range(3):  # each instant is recorded before the span around it ends
        expected = [(name, {"i": i}) for i in range(50) for name in ("step", "work")]
        assert by_thread[f"file (worker-{n})"] == expected
    spans = [event for event in trace if event.kind == "span"]
    instants = [event for event in trace if event.kind == "instant"]
    assert len(spans) == 150 and all(event.dur_ns >= 0 for event in spans)
    assert len(instants) == 170 and all(event.dur_ns == 0 for event in instants)


def test_file_keeps_runs_in_order_per_track_and_track_renames(tmp_path: Path) -> None:
    path = tmp_path / "trace.rt"
    listener = FileListener(path, process_name="p")
    first, second = new_track("first"), new_track("second")
    listener.receive(first, records(["a", "b"]))
    listener.receive(second, records(["c"], start=2))
    renamed = TrackInfo(first.track_id, first.kind, "renamed", first.thread_id)
    listener.receive(renamed, [])  # what the flusher hands over for a renamed thread
    listener.receive(renamed, records(["d"], start=3))
    assert listener.close(1.0)
    trace = read_trace_file(path)
    assert [(e.name, e.track.name, e.args["i"]) for e in trace] == [
        ("a", "first", 0),
        ("b", "first", 1),
        ("c", "second", 2),
        ("d", "renamed", 3),
    ]
    assert {e.track.track_id for e in trace if e.track.name in ("first", "renamed")} == {first.track_id}


def test_file_is_readable_before_it_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "trace.rt"
    listener = FileListener(path)
    listener.receive(new_track(), records(["a", "b"]))
    assert listener.flush(1.0)
    trace = read_trace_file(path)
    assert (names(trace), trace.error, trace.stats) == (["a", "b"], None, Stats(0, 0, 0, 0))
    assert trace.hello is not None and trace.hello.process_name == listener.process_name
    listener.close(1.0)


def test_file_stats_count_what_was_dropped_clipped_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "trace.rt"
    listener = FileListener(path)
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    track = new_track()
    listener.receive(track, records(["before"]))
    listener.receive(
        track,
        [
            # Within every argument limit, yet larger than a file's frame: the event cannot be written.
            *records(["huge"], start=1, pad=["x" * 1000] * 200),
            *records(["deep"], start=2, deep=deep),
            *records(["x" * 1_000], start=3),
        ],
    )
    assert not listener.flush(1.0)  # an event was dropped since the last flush
    assert listener.flush(1.0)  # ... and none since
    listener.receive(track, records(["after"], start=4))
    assert listener.close(1.0)
    trace = read_trace_file(path)
    assert names(trace) == ["before", "deep", display_text("x" * 1_000), "after"]
    assert len(names(trace)[2]) == MAX_STRING_CHARS
    assert trace.stats == Stats(dropped_events=1, dropped_frames=1, label_overflow_events=0, clipped_args=1)
    assert (listener.dropped_events, listener.encoder.clipped_args) == (1, 1)


def write_three_runs(path: Path) -> FileListener:
    """A file whose last frame is the EVENTS frame of the third run (stats are written by the flush before it)."""
    listener = FileListener(path, process_name="torn")
    track = new_track()
    listener.receive(track, records(["a", "b"]))
    listener.receive(new_track("other"), records(["c"], start=2))
    assert listener.flush(1.0)
    listener.receive(track, records(["d", "e", "f"], start=3))
    assert listener.close(1.0)
    return listener


def test_torn_tail_loses_only_the_last_frame(tmp_path: Path) -> None:
    path = tmp_path / "whole.rt"
    write_three_runs(path)
    data = path.read_bytes()
    whole = read_trace_file(path)
    assert (names(whole), whole.error) == (["a", "b", "c", "d", "e", "f"], None)
    last_start, last_type = frame_offsets(data)[-1]
    assert last_type == FrameType.EVENTS
    torn = tmp_path / "torn.rt"
    for size in range(last_start, len(data)):
        torn.write_bytes(data[:size])
        trace = read_trace_file(torn)
        assert names(trace) == ["a", "b", "c"], size
        assert trace.hello == whole.hello
        assert trace.stats == whole.stats == Stats(0, 0, 0, 0)
        if size == last_start:  # cut at a frame boundary: a clean end
            assert trace.error is None
        else:
            assert trace.error is not None and "ended inside a frame" in trace.error, size


def test_torn_tail_inside_the_first_frames(tmp_path: Path) -> None:
    path = tmp_path / "whole.rt"
    write_three_runs(path)
    data = path.read_bytes()
    torn = tmp_path / "torn.rt"
    for size in range(1, frame_offsets(data)[1][0]):  # inside the preamble or HELLO
        torn.write_bytes(data[:size])
        trace = read_trace_file(torn)
        assert (trace.hello, trace.events) == (None, [])
        assert trace.error is not None, size  # torn, or (the preamble alone) no HELLO


def test_reading_a_file_that_is_not_a_trace_sets_the_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-trace.rt"
    path.write_bytes(b"GIF89a" + bytes(100))
    trace = read_trace_file(path)
    assert (trace.hello, trace.events) == (None, [])
    assert trace.error is not None and "magic" in trace.error


def test_streams_end_to_end_read_back_each_with_its_own_tables(tmp_path: Path) -> None:
    parts = []
    for name in ("first", "second"):
        path = tmp_path / f"{name}.rt"
        tl = Timeline(name, [FileListener(path, process_name=name)])
        with tl.scope(f"{name} span", n=1):
            tl.instant(f"{name} instant")
        tl.close()
        parts.append(path.read_bytes())
    both = tmp_path / "both.rt"
    both.write_bytes(b"".join(parts))
    streams = read_trace_streams(both)
    assert [s.hello.process_name for s in streams if s.hello] == ["first", "second"]
    assert [sorted(e.name for e in s.events) for s in streams] == [
        ["first instant", "first span"],
        ["second instant", "second span"],
    ]
    assert [s.error for s in streams] == [None, None]
    first = read_trace_file(both)
    assert first.hello is not None and first.hello.process_name == "first" and len(first.events) == 2
    assert first.error is not None and "read_trace_streams" in first.error
    # A second stream torn inside its preamble or HELLO: the first is whole, the error says where reading stopped.
    for cut in [*range(1, PREAMBLE.size), *range(PREAMBLE.size + 1, 40)]:  # (a preamble alone is an empty stream)
        torn = tmp_path / "torn.rt"
        torn.write_bytes(parts[0] + parts[1][:cut])
        streams = read_trace_streams(torn)
        assert len(streams[0].events) == 2 and streams[-1].error is not None, cut


@pytest.mark.parametrize("where", ["missing-directory", "a-directory"])
def test_file_listener_on_an_unwritable_path_raises_config_error(tmp_path: Path, where: str) -> None:
    path = tmp_path / "missing" / "trace.rt" if where == "missing-directory" else tmp_path
    with pytest.raises(ConfigError, match="cannot open") as raised:
        FileListener(path)
    assert isinstance(raised.value, RingtraceError) and isinstance(raised.value, ValueError)
    assert str(path) in str(raised.value)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs a device that refuses writes")
def test_file_that_refuses_writes_counts_its_losses_and_never_raises() -> None:
    listener = FileListener("/dev/full")  # opens, then every write fails (no space left)
    tl = Timeline("full", [listener])
    for i in range(10):
        tl.instant("lost", i=i)
    assert not tl.flush()
    assert listener.dropped_events == tl.dropped_events == 10
    assert not tl.close()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds the listener's descriptor in /proc/self/fd")
def test_a_file_whose_descriptor_the_program_closed_and_reused_gets_none_of_our_bytes(tmp_path: Path) -> None:
    path = tmp_path / "trace.rt"
    listener = FileListener(path)
    listener.receive(new_track(), records(["before"]))
    assert listener.flush(1.0)
    [number] = [int(fd.name) for fd in Path("/proc/self/fd").iterdir() if os.path.realpath(fd) == str(path)]
    os.close(number)  # as a daemon's os.closerange does; then the program's next file takes the number
    programs = os.open(tmp_path / "programs.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert programs == number
        listener.receive(new_track(), records(["after"]))
        assert not listener.flush(1.0)
        assert listener.dropped_events == 1
        assert listener.close(1.0) is False
        os.fstat(programs)  # still open: the listener let go of the number without closing it
        assert (tmp_path / "programs.log").read_bytes() == b""
        assert names(read_trace_file(path)) == ["before"]
    finally:
        os.close(programs)


# -- MemoryListener ------------------------------------------------------------------------------------------------


def test_memory_listener_keeps_decoded_events_in_order() -> None:
    listener = MemoryListener()
    track = new_track()
    listener.receive(track, records(["a", "b"]))
    listener.receive(track, [INSTANT, ["odd", "label"], 5_000, 5_000, None])
    events = listener.events
    assert [(e.kind, e.name, e.ts_ns, e.dur_ns, e.args) for e in events] == [
        ("span", "a", 1_000, 10, {"i": 0}),
        ("span", "b", 1_100, 10, {"i": 1}),
        ("instant", "['odd', 'label']", 5_000, 0, None),
    ]
    assert {e.track for e in events} == {track}
    assert listener.clear() == events
    assert listener.events == []
    assert listener.dropped_events == 0


def test_memory_listener_max_events_drops_the_oldest_and_counts_them() -> None:
    listener = MemoryListener(max_events=3)
    track = new_track()
    listener.receive(track, records(["a", "b"]))
    assert (names_of(listener), listener.dropped_events) == (["a", "b"], 0)
    listener.receive(track, records(["c", "d"], start=2))
    assert (names_of(listener), listener.dropped_events) == (["b", "c", "d"], 1)
    listener.receive(track, records(["e", "f", "g", "h", "i"], start=4))
    assert (names_of(listener), listener.dropped_events) == (["g", "h", "i"], 6)


def test_memory_listener_max_events_through_a_timeline() -> None:
    listener = MemoryListener(max_events=5)
    tl = Timeline("bounded", [listener])
    for i in range(12):
        tl.instant("e", i=i)
    tl.flush(timeout_s=30)
    assert [e.args["i"] for e in listener.events] == list(range(7, 12))
    assert listener.dropped_events == tl.dropped_events == 7
    tl.close()


def names_of(listener: MemoryListener) -> list[str]:
    return [event.name for event in listener.events]


@pytest.mark.parametrize("max_events", [0, -1, 1.5, "3", True])
def test_memory_listener_refuses_a_bad_max_events(max_events: Any) -> None:
    with pytest.raises(ConfigError, match="max_events"):
        MemoryListener(max_events=max_events)


def test_memory_listener_flush_is_false_after_an_eviction_and_true_again_after() -> None:
    memory = MemoryListener(max_events=2)
    timeline = Timeline("t", [memory])
    for i in range(3):
        timeline.instant("e", i=i)
    assert timeline.flush() is False and memory.dropped_events == 1
    assert timeline.flush(timeout_s=30) is True  # nothing dropped since the previous flush
    timeline.close()


class Small(Event):
    v: u8


@pytest.mark.parametrize("listener", ["memory", "file"])
def test_flush_is_false_after_a_rejected_typed_event_and_true_again_after(tmp_path: Path, listener: str) -> None:
    chosen = MemoryListener() if listener == "memory" else FileListener(tmp_path / "t.rttrace")
    timeline = Timeline("t", [chosen])
    timeline.push(Small(v=1))
    assert timeline.flush(timeout_s=30) is True
    timeline.push(Small(v=300))  # does not fit a u8: the event is dropped and counted
    assert timeline.flush() is False
    timeline.push(Small(v=2))
    assert timeline.flush(timeout_s=30) is True  # nothing rejected since the previous flush
    timeline.close()


def test_a_process_renamed_is_another_to_the_collector_and_the_same_again_under_a_name_it_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_identity, "_instance", (0, ""))
    monkeypatch.setattr(process_identity, "_named", (0, {}))
    monkeypatch.setattr(process_identity, "MAX_NAMES_REMEMBERED", 2)
    a = ProcessIdentity("a").instance_id
    rename_instance("a", "b")
    b = ProcessIdentity("b").instance_id
    rename_instance("b", "a")
    assert ProcessIdentity("a").instance_id == a != b
    rename_instance("a", "b")
    assert ProcessIdentity("b").instance_id == b
    rename_instance("b", "c")  # the names left: a, b
    c = ProcessIdentity("c").instance_id
    rename_instance("c", "a")  # a, b, c: a, the least recently left, forgotten
    assert ProcessIdentity("a").instance_id not in (a, b, c)  # another process
    rename_instance("a", "c")
    assert ProcessIdentity("c").instance_id == c
