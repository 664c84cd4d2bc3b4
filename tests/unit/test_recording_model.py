"""The recording model on a timeline: counters, markers, sources and async slices, as a memory listener sees them."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from alone import run_alone
from ringtrace.client import DecodedEvent, Event, MemoryListener, Timeline
from ringtrace.wire.frame_types import EVENTS_HEADER, FRAME_HEADER
from ringtrace.wire.message_format import render
from ringtrace.wire.model import THREAD_TRACK, TrackInfo
from ringtrace.wire.stream_encoder import StreamEncoder
from ringtrace.wire.table_frames import KindSpec
from waiting import ringtrace_threads, wait_for

TRACK = TrackInfo(9, THREAD_TRACK, "main", 1)


@pytest.fixture
def listener() -> MemoryListener:
    return MemoryListener()


@pytest.fixture
def tl(listener: MemoryListener) -> Iterator[Timeline]:
    timeline = Timeline("model", [listener])
    yield timeline
    timeline.close()


def flushed(tl: Timeline, listener: MemoryListener) -> list[DecodedEvent]:
    tl.flush(timeout_s=30)
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
    stack = events[3].args["stack"]
    assert "test_markers_start_end_instant" in stack.splitlines()[-2]  # the caller's frame last: none of ringtrace's
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
    assert tl.flush(timeout_s=30)
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
    assert tl.flush(timeout_s=30)
    assert [e.kind for e in listener.events] == ["source_open"]
    assert [e.kind for e in again.events] == ["source_open"]
    tl.close()


def test_a_source_nobody_holds_is_retired_once_drained(tl: Timeline, listener: MemoryListener) -> None:
    src = tl.source("short-lived")
    src.open()
    track = src.track
    del src
    gc.collect()
    assert tl.flush(timeout_s=30)
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
            tl.flush(timeout_s=30)
            os.write(write, " ".join(e.kind for e in listener.events).encode())
        finally:
            os._exit(0)
    os.close(write)
    child_kinds = os.read(read, 1000)
    os.waitpid(pid, 0)
    assert child_kinds == b"source_close marker counter"
    src.close()
    assert tl.flush(timeout_s=30)
    assert [e.kind for e in listener.events] == ["source_open", "source_close"]
    tl.close()


# -- messages (Snabb) ----------------------------------------------------------------------------------------------


def test_messages_render_their_values_and_follow_the_priority(tl: Timeline, listener: MemoryListener) -> None:
    processed = tl.message("engine", "info", "processed $tcp, $udp, and $other\nmore lines: $not_a_value")
    detail = tl.message("engine", "debug", "detail $x")
    assert tl.priority == "info" and processed.enabled and not detail.enabled
    processed(10, 20, 3)
    detail(1)
    tl.set_priority("debug")
    detail(object.__new__(Unprintable))  # any value: shown as text
    tl.set_priority("fatal")
    processed(1, 2, 3)
    events = flushed(tl, listener)
    assert [(e.kind, e.name) for e in events] == [
        ("engine", "processed tcp(10), udp(20), and other(3)"),
        ("engine", "detail x(<unprintable Unprintable>)"),
    ]
    assert events[0].args == {"tcp": 10, "udp": 20, "other": 3}


def test_a_value_written_with_braces_shows_alone(tl: Timeline, listener: MemoryListener) -> None:
    failed = tl.message("app", "error", "${message} (${exception}: $detail) costs $$x")
    failed("lookup failed", "KeyError", "'k'", 5)
    [event] = flushed(tl, listener)
    assert event.name == "lookup failed (KeyError: detail('k')) costs $x(5)"
    assert event.args == {"message": "lookup failed", "exception": "KeyError", "detail": "'k'", "x": 5}


def test_a_kind_without_a_field_for_a_braced_name_renders_as_it_did() -> None:
    # A kind defined before ${name} was a placeholder: its text keeps the braces, its fields are the $names only.
    old = KindSpec(id=99, name="app", shape="message", fields=(("n", "any"),), text="cost ${x} n $n", priority="info")
    assert render(old, [3]) == ("cost ${x} n n(3)", {"n": 3})


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_a_message_is_one_kind_however_often_it_is_defined(tl: Timeline) -> None:
    first = tl.message("net", "warning", "dropped $n")
    again = tl.message("net", "warning", "dropped $n")
    other = Timeline("other").message("net", "warning", "dropped $n")
    assert first.kind is again.kind is other.kind
    assert first.kind.shape == "message" and first.kind.text == "dropped $n" and first.kind.priority == "warning"


@pytest.mark.parametrize(
    ("priority", "text", "message"),
    [
        ("loud", "x", "priority must be one of fatal, error, warning, info, debug, trace, trace\\+"),
        ("info", "$a $b $c $d $e $f $g", "at most 6 \\$values"),
    ],
)
def test_a_bad_message_definition_raises_naming_the_problem(
    tl: Timeline, priority: str, text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        tl.message("c", priority, text)
    with pytest.raises(ValueError, match="priority must be one of"):
        tl.set_priority("verbose")


def test_sampling_turns_detail_on_for_a_fraction_of_windows(tl: Timeline, listener: MemoryListener) -> None:
    trace = tl.message("loop", "trace", "breath $n")
    trace_plus = tl.message("loop", "trace+", "deeper $n")
    tl.sample("trace", fraction=1.0, window_s=0.001)
    trace(1)
    trace_plus(1)  # past the sampled priority: stays off
    tl.sample("trace", fraction=0.0)
    trace(2)
    tl.sample(None)
    trace(3)
    assert [e.name for e in flushed(tl, listener)] == ["breath n(1)"]
    with pytest.raises(ValueError, match="fraction"):
        tl.sample("trace", fraction=1.5)


# -- odd calls never raise, and nothing waits on something else to start the flusher --------------------------------


def test_a_timeline_used_only_through_sources_is_drained_without_a_flush() -> None:
    run_alone(__file__, "drained_without_a_flush")  # (it waits on the flusher's thread: test_flusher_thread.py)


def drained_without_a_flush() -> None:
    listener = MemoryListener()
    tl = Timeline("sources only", [listener])
    src = tl.source("alone")
    src.open()
    src.close()
    wait_for(  # the flusher's own pass, not flush()
        lambda: [e.kind for e in listener.events],
        until=lambda kinds: len(kinds) >= 2,
        timeout_s=30,
        what="both events drained",
        interval_s=0.01,
        explain=ringtrace_threads,
    )
    assert [e.kind for e in listener.events] == ["source_open", "source_close"]
    tl.close()


@pytest.mark.parametrize("bad", [-1, 2**63, 2**70, 1.5])
def test_a_marker_time_outside_monotonic_ns_is_refused_alone(tl: Timeline, listener: MemoryListener, bad: Any) -> None:
    tl.instant("before")
    tl.marker("odd", ts_ns=bad)
    tl.instant("after")
    assert not tl.flush()
    assert [e.name for e in listener.events] == ["before", "after"] and listener.dropped_events == 1


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize("phase", [["start"], BadRepr(), None])
def test_a_marker_phase_of_any_type_is_refused_not_raised(tl: Timeline, listener: MemoryListener, phase: Any) -> None:
    tl.marker("x", phase)
    assert not tl.flush()
    assert listener.events == [] and listener.dropped_events == 1


def test_named_message_values_are_kept_after_the_positional_ones(tl: Timeline, listener: MemoryListener) -> None:
    on = tl.message("kw", "info", "a $a b $b")
    off = tl.message("kw", "debug", "c $c")
    on(1, b=2)
    off(c=3)  # off: nothing, and no error
    assert [(e.name, e.args) for e in flushed(tl, listener)] == [("a a(1) b b(2)", {"a": 1, "b": 2})]


def test_pushing_a_class_or_a_non_event_is_counted_only_while_observed(listener: MemoryListener) -> None:
    tl = Timeline("pushes")
    tl.push(Packet)  # type: ignore[arg-type]  # nobody listens: nothing counted
    tl.add_listener(listener)
    tl.push(Packet)  # type: ignore[arg-type]
    tl.push(42)  # type: ignore[arg-type]
    assert not tl.flush()
    assert listener.events == [] and listener.dropped_events == 2
    tl.close()


class Packet(Event):
    size: int


class Falsy(Event):
    a: int

    def __bool__(self) -> bool:
        return False


def test_a_falsy_event_is_still_a_typed_event_on_the_wire() -> None:
    encoder = StreamEncoder()
    batch = encoder.encode(TRACK, [Falsy.kind.id, "Falsy", 1, 1, Falsy(a=1)])
    ((frame, count),) = batch.events
    assert count == 1 and encoder.rejected_events == 0
    assert msgpack.unpackb(frame[FRAME_HEADER.size + EVENTS_HEADER.size :])[4][0][1:] == [1]  # [id, a]


def test_message_values_cut_to_size_are_counted_as_clipped_args(tl: Timeline) -> None:
    encoder = StreamEncoder()
    log = tl.message("big", "info", "s $s")
    log("x" * 100_000)
    (run,) = tl.drain().runs
    encoder.encode(run[0], run[1])
    assert encoder.clipped_args == 1


@pytest.mark.parametrize(("fraction", "window_s"), [(0.5, float("inf")), ("0.5", 0.001), (float("nan"), 0.001)])
def test_sample_refuses_what_is_not_a_fraction_and_a_window(tl: Timeline, fraction: Any, window_s: Any) -> None:
    with pytest.raises(ValueError, match="sample\\(\\) takes"):
        tl.sample("trace", fraction, window_s)


#: Forks 20 children while a thread keeps defining messages (each a kind of the process's registry, which only grows);
#: each child defines one of its own. Exits 0 once every child ended, 1 naming one that did not end within 30 s.
_DEFINING_WHILE_FORKING = """
import os, signal, sys, threading, time
from ringtrace.client import Timeline

tl = Timeline("defining")
stop = threading.Event()

def define():
    i = 0
    while not stop.is_set():
        tl.message("c", "info", f"text {i}")
        i += 1

definer = threading.Thread(target=define)
definer.start()
try:
    for n in range(20):
        pid = os.fork()
        if pid == 0:
            try:
                tl.message("child", "info", "defined in the child $x")
            finally:
                os._exit(0)
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                sys.exit(f"forked child {n} did not end within 30 s defining a message (it hangs)")
            time.sleep(0.005)
finally:
    stop.set()
    definer.join()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_defines_messages_while_the_parent_keeps_defining_them() -> None:
    # In a process of its own: the thousands of kinds its definer registers would stay in this one's registry, past
    # max_kinds, and the tests that run after it in this worker would find their own kinds withheld from their streams.
    done = subprocess.run(
        [sys.executable, "-c", _DEFINING_WHILE_FORKING], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
